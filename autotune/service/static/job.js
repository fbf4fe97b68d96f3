// One job, live: follows GET /jobs/{id}/events and redraws charts, stats, top configs, trials.
"use strict";

(() => {
  const jobId = Number(location.pathname.split("/").filter(Boolean).pop());
  const TRIALS_PAGE = 50;
  const S = {
    job: null, trials: [], best: null, top: null, siblings: [], rankCorrelation: [], currentModel: null, standing: null,
    es: null, ended: false,
    sort: "id", desc: false, offset: 0, error: "", total: 0,
    drawQueued: false, timers: {},
  };

  function debounce(name, ms, fn) {
    clearTimeout(S.timers[name]);
    S.timers[name] = setTimeout(fn, ms);
  }

  // --- header and stats -------------------------------------------------------------------
  function renderHeader() {
    const job = S.job;
    if (!job) return;
    document.title = `autotune · #${job.id} ${job.short_label || job.label}`;
    $("#title").textContent = `#${job.id} ${job.short_label || job.label}`;
    $("#title").title = job.label;
    $("#state-badge").replaceChildren(badge(job.state));
    $("#subtitle").textContent = [`${job.tuner} tuner`, Fmt.target(job.target), `seed ${job.seed ?? 0}`,
      job.early_stopping ? `early stopping ${job.early_stopping}` : null,
      `created ${Fmt.when(job.created_at)}`].filter(Boolean).join(" · ");
    $("#subtitle").title = job.target;
    $("#cancel").hidden = !(job.state === "queued" || job.state === "running");
    $("#waiting").hidden = !job.waiting;
    $("#waiting").textContent = job.waiting || "";
    $("#stat-best").innerHTML = job.best_gflops ? `${Fmt.gflops(job.best_gflops)} <small>GFLOP/s</small>` : "–";
    $("#stat-trials").replaceChildren(job.model_run === null || job.model_run === undefined
      ? h("span", {}, `${job.trials_done} `, h("small", {}, `/ ${job.trials}`))
      : h("span", {}, `${job.trials_done} `, h("small", {}, h("a", { href: `/model-runs/${job.model_run}` }, `run #${job.model_run}`))));
    const valid = S.trials.filter((t) => t.gflops !== null).length;
    $("#stat-valid").innerHTML = S.trials.length ? `${valid} <small>of ${S.trials.length}</small>` : "–";
    // The top record is the best (GET /best's): ranked by its re-timed figure when a
    // re-timing window compared it, else by its first measurement.
    const best = S.top || S.best;
    const cost = best ? (best.retimed_cost ?? best.cost) : null;
    $("#stat-cost").innerHTML = best ? `${Fmt.ms(cost)} <small>ms</small>` : "–";
    renderDefault();
    $("#stat-elapsed").textContent = Fmt.duration(job.started_at, job.finished_at);
    // every argument's element type; products are accumulated in float32 whatever it is
    $("#stat-dtype").textContent = job.workload.dtype || "float32";
    if (job.error) showNotice(`Job failed: ${job.error}`, true);
  }

  // The template's default config is what tuning is measured against: say when nothing
  // beat it, else by how much the best did (both by the ranking of /best).
  function renderDefault() {
    const d = S.standing, el = $("#stat-default");
    const best = S.top || S.best;
    const bestGflops = best ? (best.retimed_gflops ?? best.gflops) : null;
    if (!d || !d.gflops) {
      el.textContent = "–";
      el.title = d ? `the default config (${d.config_index}) has no valid record` : "";
      return;
    }
    const figure = d.retimed ? "re-timed" : "first measurement";
    el.title = `the template's default config (${d.config_index}): ${Fmt.gflops(d.gflops)} GFLOP/s (${figure})`;
    if (d.is_best) el.innerHTML = "1.00× <small>nothing beat the default</small>";
    else if (bestGflops) el.innerHTML = `${(bestGflops / d.gflops).toFixed(2)}× <small>faster than the default</small>`;
    else el.textContent = "–";
  }

  // --- charts -------------------------------------------------------------------------------
  function draw() {
    if (S.drawQueued) return;
    S.drawQueued = true;
    requestAnimationFrame(() => {
      S.drawQueued = false;
      renderHeader();
      drawBest();
      drawRankCorrelation();
      drawCurrentModel();
    });
  }

  function drawBest() {
    const own = [], cloud = [];
    let best = 0;
    S.trials.forEach((t, i) => {
      const g = t.gflops || 0;
      best = Math.max(best, g);
      own.push([i + 1, best]);
      if (t.gflops !== null) cloud.push([i + 1, g]);
    });
    const series = [], legend = [];
    const others = S.siblings.filter((c) => c.job_id !== jobId && c.points.length);
    others.forEach((c, i) => {
      const color = Charts.PALETTE[(i + 1) % Charts.PALETTE.length];
      series.push({ points: [[0, 0], ...c.points], step: true, color, width: 1.5, opacity: 0.85 });
      legend.push(h("span", {}, h("i", { style: `background:${color}` }), `#${c.job_id} ${c.tuner}`));
    });
    series.push({ points: own.length ? [[0, 0], ...own] : [], step: true, color: Charts.PALETTE[0], width: 2.5 });
    legend.unshift(h("span", {}, h("i", { style: `background:${Charts.PALETTE[0]}` }), `#${jobId} ${S.job ? S.job.tuner : ""} (this job): fastest first measurement`));
    if (cloud.length) legend.push(h("span", {}, h("i", { style: "background:#94a3b8;height:6px;width:6px;border-radius:50%" }), "each trial"));
    // The job's best (its Best card): after re-timing, the winner's re-timed figure, which
    // may sit below the curve (a first measurement is often a lucky one).
    const marks = [];
    if (S.job && S.job.best_gflops && own.length) {
      marks.push({ x: own.length, y: S.job.best_gflops, color: Charts.PALETTE[3] });
      legend.push(h("span", { class: "job-best" }, h("i", { style: `background:${Charts.PALETTE[3]};height:8px;width:8px;border-radius:50%` }),
        `the job's best: ${Fmt.gflops(S.job.best_gflops)} GFLOP/s`));
    }
    Charts.line($("#chart-best"), { series, dots: cloud, marks, xLabel: "trials", yLabel: "GFLOP/s", xInteger: true,
      xMax: S.job ? S.job.trials : 0,
      empty: S.job && S.job.state === "queued" ? `queued: ${S.job.waiting || "waiting for a free job slot"}` : "waiting for the first batch" });
    $("#legend-best").replaceChildren(...legend);
  }

  // The model is refit after every batch, each fit scoring on its own scale: so the server
  // ranks each batch's scores against its measurements (Spearman), never pooled raw scores.
  function drawRankCorrelation() {
    const rows = S.rankCorrelation;
    const pts = rows.map((r) => [r.batch, r.rho]);
    const tuner = S.job ? S.job.tuner : "";
    const xMax = Math.max(S.job ? S.job.trials : 0, ...pts.map((p) => p[0]));
    const series = pts.length ? [{ points: [[0, 0], [xMax, 0]], color: "#94a3b8", width: 1 }, { points: pts, color: Charts.PALETTE[0] }] : [];
    Charts.line($("#chart-rank"), { series, dots: pts, xLabel: "trials before the batch", yLabel: "Spearman ρ", xInteger: true,
      xMax, yMin: -1, yMax: 1,
      empty: tuner === "xgb" ? "no scored batch yet" : `the ${tuner || "selected"} tuner has no cost model; the xgb tuner has one` });
    const last = rows[rows.length - 1];
    $("#rank-note").textContent = last ? `${rows.length} batches; last ρ = ${last.rho.toFixed(2)} over ${last.pairs} valid trials (1: the model ordered its batch exactly)` : "";
  }

  // One model version (the latest refit) scoring every valid trial of the job (at most 2000:
  // the fastest half and the most recent), so all the scores share its scale: how well the
  // model ranks the job's configs now, which pooled per-trial predictions cannot show.
  function drawCurrentModel() {
    const m = S.currentModel;
    const tuner = S.job ? S.job.tuner : "";
    $("#model-title").textContent = m
      ? `Current model (fit after batch ${m.batch}): score vs measured GFLOP/s`
      : "Current model: score vs measured GFLOP/s";
    Charts.scatter($("#chart-model"), { points: m ? m.points : [], xLabel: "model score (higher: predicted faster)", yLabel: "measured GFLOP/s",
      empty: tuner === "xgb" ? "no model fit yet" : `the ${tuner || "selected"} tuner has no cost model; the xgb tuner has one` });
    // The model was fit on these trials: this is how well it learnt the job's ranking; how
    // well it ranked configs before they were measured is the per-batch chart's ρ.
    $("#model-note").textContent = m && m.points.length
      ? `${m.points.length} valid trials, each scored by the model refit after batch ${m.batch} (${m.trials} trials of this job measured, these among them)` +
        (m.rho === null ? "" : `; Spearman ρ = ${m.rho.toFixed(2)} (1: it ranks them exactly)`) +
        ". Its ranking before measuring a batch is the rank correlation chart's."
      : "";
  }

  // --- top configs --------------------------------------------------------------------------
  async function loadTop() {
    const form = $("#top-form").value;
    try {
      const page = await Api.latest("top", `/jobs/${jobId}/top?k=5&form=${form}`);
      if (!page) return;
      const box = $("#top");
      S.top = page.items[0] || null;
      renderHeader();
      if (!page.items.length) { box.replaceChildren(h("div", { class: "empty" }, "no valid config yet")); return; }
      // Keep the configs the reader has open; when none of them is still in the top k (the
      // auto-opened best was overtaken), open the new best so the code stays in view.
      const indices = new Set(page.items.map((t) => String(t.config.index)));
      const open = new Set([...box.querySelectorAll("details[open]")].map((d) => d.dataset.index)
        .filter((i) => indices.has(i)));
      box.replaceChildren(...page.items.map((t) => {
        const knobs = Object.entries(t.config.knobs).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("  ");
        // ranked by its re-timed figure when a re-timing window compared it
        const retimed = t.retimed_cost !== null && t.retimed_cost !== undefined;
        const d = h("details", { "data-index": t.config.index },
          h("summary", {}, h("span", { class: "rank" }, t.rank),
            h("strong", {}, `${Fmt.gflops(retimed ? t.retimed_gflops : t.gflops)} GFLOP/s`),
            h("span", { class: "muted", title: retimed ? `first measurement: ${Fmt.gflops(t.gflops)} GFLOP/s, ${Fmt.ms(t.cost)} ms` : "" },
              `${Fmt.ms(retimed ? t.retimed_cost : t.cost)} ms${retimed ? " · re-timed" : ""}`),
            h("span", { class: "muted" }, `config ${t.config.index}`), h("span", { class: "knobs", title: knobs }, knobs)),
          h("pre", { class: "code" }, t.source || t.source_error || ""));
        if (open.has(String(t.config.index)) || (!open.size && t.rank === 1)) d.open = true;
        return d;
      }));
    } catch (err) { /* shown by the notice of the stream */ }
  }

  // --- trials table ---------------------------------------------------------------------------
  async function loadTrials() {
    const sort = (S.desc ? "-" : "") + S.sort;
    const q = `?offset=${S.offset}&limit=${TRIALS_PAGE}&sort=${sort}` + (S.error ? `&error=${S.error}` : "");
    try {
      const page = await Api.latest("trials", `/jobs/${jobId}/trials${q}`);
      if (!page) return;
      S.total = page.total;
      $("#trials tbody").replaceChildren(...page.items.map((t) => {
        const knobs = Object.entries(t.config.knobs).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ");
        return h("tr", {},
          h("td", { class: "num" }, t.id), h("td", { class: "num" }, t.config.index),
          h("td", { class: "num" }, Fmt.gflops(t.gflops)), h("td", { class: "num" }, Fmt.ms(t.cost)),
          h("td", { class: "num muted" }, t.predicted === null ? "–" : t.predicted.toPrecision(3)),
          h("td", {}, h("span", { class: t.error === "none" ? "badge none" : "badge err" }, t.error === "none" ? "valid" : t.error)),
          h("td", { class: "num muted" }, t.build_s.toFixed(2)),
          h("td", { class: "msg", title: t.error_msg || knobs }, t.error_msg || knobs));
      }));
      if (!page.items.length) $("#trials tbody").replaceChildren(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "no trials")));
      const last = Math.min(S.total, S.offset + TRIALS_PAGE);
      $("#tpage-info").textContent = S.total ? `${S.offset + 1}–${last} of ${S.total}` : "";
      $("#tprev").disabled = S.offset === 0;
      $("#tnext").disabled = last >= S.total;
      document.querySelectorAll("#trials th.sortable").forEach((th) => {
        th.classList.toggle("sorted", th.dataset.sort === S.sort);
        th.classList.toggle("asc", th.dataset.sort === S.sort && !S.desc);
      });
    } catch (err) { /* keep the old page */ }
  }

  // --- who measured it ------------------------------------------------------------------------
  async function loadWorkers() {
    try {
      const page = await Api.latest("measured-by", `/jobs/${jobId}/workers`);
      if (!page) return;
      const rows = page.items.map((w) => h("tr", { "data-worker": w.worker },
        h("td", { class: "wl" }, w.worker), h("td", { class: "num trials" }, w.trials),
        h("td", { class: "num failed" }, w.failed)));
      $("#measured-by tbody").replaceChildren(...(rows.length ? rows
        : [h("tr", {}, h("td", { colspan: 3, class: "empty" }, "no trials yet"))]));
    } catch (err) { /* keep the old table */ }
  }

  async function loadSiblings() {
    try {
      const page = await Api.latest("siblings", `/jobs/${jobId}/curves?siblings=true&points=300`);
      if (!page) return;
      S.siblings = page.items;
      S.rankCorrelation = page.rank_correlation || [];
      S.currentModel = page.current_model || null;
      S.standing = page.default || null;
      draw();
    } catch (err) { /* optional */ }
  }

  // --- the event stream -----------------------------------------------------------------------
  function connect() {
    const es = new EventSource(`${API}/jobs/${jobId}/events`);
    S.es = es;
    es.onopen = () => { setLive(true); showNotice(S.job && S.job.error ? `Job failed: ${S.job.error}` : ""); };
    es.onerror = () => { if (!S.ended) { setLive(false); } };  // the browser reconnects
    es.addEventListener("batch", (e) => {
      const msg = JSON.parse(e.data);
      for (const t of msg.trials) S.trials.push(t);
      const prevBest = S.best ? S.best.id : null;
      S.best = msg.best;
      if (S.job) S.job.trials_done = Math.max(S.job.trials_done, msg.trials_done);
      draw();
      debounce("trials", 800, loadTrials);
      debounce("workers", 2000, loadWorkers);
      if ((S.best ? S.best.id : null) !== prevBest) debounce("top", 1500, loadTop);
    });
    es.addEventListener("state", (e) => {
      const msg = JSON.parse(e.data);
      if (S.job) Object.assign(S.job, { state: msg.state, error: msg.error, trials_done: msg.trials_done, best_gflops: msg.best_gflops, waiting: msg.waiting });
      draw();
    });
    es.addEventListener("end", async () => {
      S.ended = true;
      es.close();
      S.job = await Api.get(`/jobs/${jobId}`);
      setLive(false, S.job.state);
      draw(); loadTop(); loadTrials(); loadSiblings(); loadWorkers();
    });
  }

  // --- controls -------------------------------------------------------------------------------
  document.querySelectorAll("#trials th.sortable").forEach((th) => th.addEventListener("click", () => {
    if (S.sort === th.dataset.sort) S.desc = !S.desc;
    else { S.sort = th.dataset.sort; S.desc = th.dataset.sort !== "cost"; }
    S.offset = 0; loadTrials();
  }));
  $("#error-filter").addEventListener("change", (e) => { S.error = e.target.value; S.offset = 0; loadTrials(); });
  $("#tprev").addEventListener("click", () => { S.offset = Math.max(0, S.offset - TRIALS_PAGE); loadTrials(); });
  $("#tnext").addEventListener("click", () => { S.offset += TRIALS_PAGE; loadTrials(); });
  $("#top-form").addEventListener("change", loadTop);
  $("#cancel").addEventListener("click", async () => {
    if (!confirm(`Cancel job #${jobId}? Its batch in flight is given up.`)) return;
    try { S.job = await Api.post(`/jobs/${jobId}/cancel`); draw(); } catch (err) { showNotice(`Cancel failed: ${err.message}`, true); }
  });
  window.addEventListener("resize", () => debounce("resize", 150, draw));
  setupKeyBox();

  (async () => {
    try {
      S.job = await Api.get(`/jobs/${jobId}`);
    } catch (err) {
      showNotice(`Cannot load job ${jobId}: ${err.message}`, true);
      return;
    }
    draw();
    connect();
    loadTrials();
    loadTop();
    loadSiblings();
    loadWorkers();
    // Other jobs on this workload may still be running: refresh their curves now and then.
    setInterval(() => { if (!document.hidden) loadSiblings(); }, 10000);
  })();
})();
