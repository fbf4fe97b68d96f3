// One model run: its estimated latency over the budget, and its tasks (polled while it runs).
"use strict";

(() => {
  const POLL_MS = 3000;
  const id = Number(location.pathname.split("/").filter(Boolean).pop());
  let timer = null, last = null;

  function taskRow(t) {
    const where = t.nodes.length > 3 ? `${t.nodes.slice(0, 3).join(", ")} +${t.nodes.length - 3}` : t.nodes.join(", ");
    return h("tr", { "data-task": t.index },
      h("td", { class: "num" }, t.index),
      h("td", { class: "wl", title: t.label }, t.short_label || t.label),
      h("td", { class: "num" }, `×${t.weight}`),
      h("td", { class: "num trials" }, t.trials),
      h("td", { class: "num best" }, Fmt.ms(t.best_cost_s)),
      h("td", { class: "num share" }, t.share === null ? "–" : `${(100 * t.share).toFixed(1)}%`),
      h("td", { class: "muted where", title: t.nodes.join(", ") }, where),
      h("td", { class: "jobs" }, ...t.jobs.map((j) => h("a", { href: `/jobs/${j}` }, `#${j} `))));
  }

  function draw(run) {
    $("#title").replaceChildren(`Model run #${run.id}: ${run.name} `, badge(run.state));
    $("#summary").textContent = `${Fmt.target(run.target)} · ${run.trials_done} / ${run.budget} trials spent · ` +
      `${run.tasks} tasks · estimated latency ${Fmt.ms(run.estimated_latency_s)} ms` + (run.error ? ` · ${run.error}` : "");
    const points = run.history.filter((p) => p.estimated_latency_s !== null).map((p) => [p.trials_done, p.estimated_latency_s * 1e3]);
    // each round's estimate is a dot too: a run of one round (or of rounds that spent no
    // trials, as a resumed run's first) still reads as a point, not a vertical line
    Charts.line($("#chart-latency"), { series: [{ name: "estimated latency", points, step: true }], dots: points,
      dotColor: Charts.PALETTE[0], dotSize: 7, xLabel: "trials spent", yLabel: "ms", xMax: run.budget, xInteger: true,
      empty: "no estimate yet: every task needs a valid config" });
    $("#tasks tbody").replaceChildren(...run.task_list.map(taskRow));
    $("#unsupported-card").hidden = run.unsupported.length === 0;
    $("#unsupported tbody").replaceChildren(...run.unsupported.map((u) =>
      h("tr", {}, h("td", {}, u.node), h("td", {}, u.op), h("td", { class: "msg" }, u.reason))));
  }

  async function refresh() {
    try {
      const run = await Api.latest("model-run", `/model-runs/${id}`);
      if (!run) return;
      last = run;
      draw(run);
      setLive(run.state === "running", run.state);
      showNotice("", false);
    } catch (err) {
      setLive(false);
      showNotice(`Cannot read model run ${id}: ${err.message}`, true);
    }
  }

  function schedule() {
    clearTimeout(timer);
    if (!document.hidden && (!last || last.state === "running")) {
      timer = setTimeout(async () => { await refresh(); schedule(); }, POLL_MS);
    }
  }

  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh().then(schedule); });
  window.addEventListener("resize", () => { if (last) draw(last); });
  setupKeyBox();
  refresh().then(schedule);
})();
