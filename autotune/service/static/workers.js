// The workers view: polls GET /workers and redraws who measures what, and each target's load.
"use strict";

(() => {
  const POLL_MS = 2000;
  let timer = null;

  function seen(unix) {
    return unix ? Fmt.when(new Date(unix * 1000).toISOString()) : "–";
  }

  function workerRow(w) {
    return h("tr", { "data-worker": w.worker, title: w.reason || "" },
      h("td", { class: "wl" }, w.worker),
      h("td", { class: "state" }, badge(w.state)),
      h("td", {}, w.host),
      h("td", { title: w.target }, Fmt.target(w.target)),
      h("td", { class: "msg", title: w.device }, w.reason ? `${w.device} · ${w.reason}` : w.device),
      h("td", { class: "job" }, w.job === null || w.job === undefined ? "–" : h("a", { href: `/jobs/${w.job}` }, `#${w.job}`)),
      h("td", { class: "num trials" }, w.trials ?? "–"),
      h("td", { class: "num failures" }, w.failures ?? "–"),
      h("td", { class: "muted seen" }, seen(w.last_seen)));
  }

  function targetRow(t) {
    return h("tr", { "data-target": t.target },
      h("td", { title: t.target }, t.target),
      h("td", { class: "num queued" }, t.queued),
      h("td", { class: "num in-flight" }, t.in_flight),
      h("td", { class: "num free" }, t.free));
  }

  async function refresh() {
    try {
      const page = await Api.latest("workers", "/workers");
      if (!page) return;
      $("#workers tbody").replaceChildren(...page.workers.map(workerRow));
      $("#targets tbody").replaceChildren(...page.targets.map(targetRow));
      const live = page.workers.filter((w) => w.state !== "dead").length;
      $("#summary").textContent = (page.cluster ? `Ray cluster at ${page.cluster}` : "measuring on this host") +
        ` · ${live} live worker${live === 1 ? "" : "s"}`;
      const none = $("#no-workers");
      none.hidden = page.workers.length > 0;
      none.textContent = page.cluster
        ? "No worker has joined. Start one with: autotune worker --address " + page.cluster
        : "No job has measured on this host since the service started.";
      $("#no-targets").hidden = page.targets.length > 0;
      setLive(true);
      showNotice(page.error ? `Cannot read the cluster: ${page.error}` : "", !!page.error);
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
