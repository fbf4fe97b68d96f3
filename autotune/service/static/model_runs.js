// The model runs: polls GET /model-runs and redraws the list.
"use strict";

(() => {
  const POLL_MS = 3000;
  let timer = null;

  function row(r) {
    return h("tr", { class: "clickable", "data-id": r.id, onclick: () => { location.href = `/model-runs/${r.id}`; } },
      h("td", {}, h("a", { href: `/model-runs/${r.id}` }, `#${r.id}`)),
      h("td", { class: "state" }, badge(r.state)),
      h("td", { class: "wl", title: r.name }, r.name),
      h("td", { title: r.target }, Fmt.target(r.target)),
      h("td", { class: "num" }, r.tasks),
      h("td", { class: "trials" }, progressBar(r.trials_done, r.budget)),
      h("td", { class: "num latency" }, Fmt.ms(r.estimated_latency_s)),
      h("td", { class: "muted", title: r.updated_at }, Fmt.when(r.updated_at)));
  }

  async function refresh() {
    try {
      const page = await Api.latest("model-runs", "/model-runs?limit=100");
      if (!page) return;
      $("#runs tbody").replaceChildren(...page.items.map(row));
      $("#no-runs").hidden = page.items.length > 0;
      setLive(true);
      showNotice("", false);
    } catch (err) {
      setLive(false);
      showNotice(`Cannot reach the service: ${err.message}`, true);
    }
  }

  function schedule() {
    clearTimeout(timer);
    if (!document.hidden) timer = setTimeout(async () => { await refresh(); schedule(); }, POLL_MS);
  }

  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh().then(schedule); });
  setupKeyBox();
  refresh().then(schedule);
})();
