// The job list: polls GET /jobs, updates rows in place, draws best-so-far sparklines.
"use strict";

(() => {
  const PAGE = 25, POLL_MS = 2000;
  const state = { offset: 0, filter: "", timer: null, sparkSeen: new Map() };
  const tbody = $("#jobs tbody");

  function row(job) {
    const tr = h("tr", { id: `job-${job.id}`, class: "clickable", "data-id": job.id,
                         onclick: () => { location.href = `/jobs/${job.id}`; } },
      h("td", {}, h("a", { href: `/jobs/${job.id}` }, `#${job.id}`)),
      h("td", { class: "state" }),
      h("td", { class: "wl", title: job.label }, job.short_label || job.label),
      h("td", { title: job.target }, Fmt.target(job.target)),
      h("td", {}, job.tuner),
      h("td", { class: "trials" }),
      h("td", { class: "num best" }),
      h("td", { class: "spark-cell" }),
      h("td", { class: "created muted" }));
    return tr;
  }

  function update(tr, job) {
    tr.querySelector(".state").replaceChildren(badge(job.state));
    tr.querySelector(".trials").replaceChildren(jobTrials(job));
    tr.querySelector(".best").textContent = Fmt.gflops(job.best_gflops);
    tr.querySelector(".created").textContent = Fmt.when(job.created_at);
    tr.querySelector(".created").title = job.created_at;
    if (job.error) tr.title = job.error;
    const seen = state.sparkSeen.get(job.id);
    if (seen !== job.trials_done && job.trials_done > 0) {
      state.sparkSeen.set(job.id, job.trials_done);
      Api.latest(`spark-${job.id}`, `/jobs/${job.id}/curves?points=40`).then((page) => {
        const curve = page && page.items[0];
        if (curve) Charts.sparkline(tr.querySelector(".spark-cell"), curve.points);
      }).catch(() => state.sparkSeen.delete(job.id));
    }
  }

  async function refresh() {
    const q = `?offset=${state.offset}&limit=${PAGE}` + (state.filter ? `&state=${state.filter}` : "");
    try {
      const page = await Api.latest("jobs", `/jobs${q}`);
      if (!page) return;  // a newer refresh (another filter or page) answers instead
      const keep = new Set();
      for (const job of page.items) {  // newest first; appending moves existing rows in order
        const tr = document.getElementById(`job-${job.id}`) || row(job);
        tbody.appendChild(tr);
        update(tr, job);
        keep.add(tr);
      }
      for (const tr of [...tbody.children]) if (!keep.has(tr)) tr.remove();
      $("#no-jobs").hidden = page.total > 0;
      const running = page.items.filter((j) => j.state === "running").length;
      $("#summary").textContent = `${page.total} job${page.total === 1 ? "" : "s"}` +
        (state.filter ? ` ${state.filter}` : "") + (running ? ` · ${running} running on this page` : "");
      const last = Math.min(page.total, state.offset + PAGE);
      $("#page-info").textContent = page.total ? `${state.offset + 1}–${last} of ${page.total}` : "";
      $("#prev").disabled = state.offset === 0;
      $("#next").disabled = last >= page.total;
      setLive(true);
      showNotice("");
    } catch (err) {
      setLive(false);
      showNotice(`Cannot reach the service: ${err.message}`, true);
    }
  }

  function schedule() {
    clearTimeout(state.timer);
    if (!document.hidden) state.timer = setTimeout(async () => { await refresh(); schedule(); }, POLL_MS);
  }

  $("#state-filter").addEventListener("change", (e) => { state.filter = e.target.value; state.offset = 0; tbody.replaceChildren(); refresh(); });
  $("#prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); refresh(); });
  $("#next").addEventListener("click", () => { state.offset += PAGE; refresh(); });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh().then(schedule); });
  setupKeyBox();
  refresh().then(schedule);
})();
