// Small SVG charts for the dashboard: line/step series with dots, scatter, sparkline.
// No dependencies; each call redraws the whole chart into its container element.
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#0ea5e9", "#64748b"];

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  // "Nice" tick values covering [lo, hi] (about n of them); whole numbers when ``integer``
  // (counts such as trials: no 2.5 steps, no step below 1).
  function ticks(lo, hi, n, integer) {
    if (!(hi > lo)) hi = lo + 1;
    const raw = (hi - lo) / Math.max(n, 1);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const steps = (integer ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10]).map((m) => m * mag);
    let step = steps.find((s) => s >= raw) || raw;
    if (integer) step = Math.max(1, Math.round(step));
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e4) return String(v);
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 100 || v === 0) return v.toFixed(0);
    if (a >= 1) return v.toFixed(a >= 10 ? 0 : 1);
    return v.toPrecision(2);
  }

  function frame(container, opts, xmin, xmax, ymin, ymax) {
    container.textContent = "";
    const w = container.clientWidth || 600, h = container.clientHeight || 280;
    const m = { l: 48, r: 12, t: 10, b: 34 };
    const svg = el("svg", { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none" }, container);
    const iw = w - m.l - m.r, ih = h - m.t - m.b;
    const x = (v) => m.l + ((v - xmin) / (xmax - xmin || 1)) * iw;
    const y = (v) => m.t + ih - ((v - ymin) / (ymax - ymin || 1)) * ih;
    const grid = el("g", { class: "grid" }, svg), axis = el("g", { class: "axis" }, svg);
    for (const t of ticks(ymin, ymax, 5)) {
      el("line", { x1: m.l, x2: m.l + iw, y1: y(t), y2: y(t) }, grid);
      el("text", { x: m.l - 6, y: y(t) + 4, "text-anchor": "end" }, axis).textContent = fmt(t);
    }
    for (const t of ticks(xmin, xmax, Math.max(2, Math.floor(iw / 80)), opts.xInteger)) {
      el("line", { x1: x(t), x2: x(t), y1: m.t + ih, y2: m.t + ih + 4 }, axis);
      el("text", { x: x(t), y: m.t + ih + 16, "text-anchor": "middle" }, axis).textContent = fmt(t);
    }
    el("line", { x1: m.l, x2: m.l + iw, y1: m.t + ih, y2: m.t + ih }, axis);
    if (opts.xLabel) el("text", { class: "label", x: m.l + iw / 2, y: h - 2, "text-anchor": "middle" }, svg).textContent = opts.xLabel;
    if (opts.yLabel) {
      el("text", { class: "label", x: 12, y: m.t + ih / 2, transform: `rotate(-90 12 ${m.t + ih / 2})`, "text-anchor": "middle" }, svg).textContent = opts.yLabel;
    }
    return { svg, x, y };
  }

  // One path of zero-length round-capped segments: thousands of dots, one DOM node.
  function dots(parent, points, x, y, color, size, opacity) {
    if (!points.length) return;
    let d = "";
    for (const [px, py] of points) d += `M${x(px).toFixed(1)} ${y(py).toFixed(1)}h0`;
    el("path", { class: "dots", d, stroke: color, "stroke-width": size, "stroke-linecap": "round", opacity }, parent);
  }

  // series: [{name, points: [[x, y], ...], color?, step?, width?}], dots: [[x, y], ...],
  // marks: [{x, y, color}] (large dots drawn last); the y axis spans opts.yMin (default 0)
  // to opts.yMax (default: the data's top); opts.xInteger: whole-number x ticks; opts.dotColor
  // and opts.dotSize: the dots' (default: small, grey, translucent).
  function line(container, opts) {
    const series = opts.series || [], cloud = opts.dots || [], marks = opts.marks || [];
    const all = series.flatMap((s) => s.points).concat(cloud, marks.map((m) => [m.x, m.y]));
    if (!all.length) { container.innerHTML = `<div class="empty">${opts.empty || "no data yet"}</div>`; return; }
    const xmax = Math.max(opts.xMax || 0, ...all.map((p) => p[0]));
    const ymax = opts.yMax ?? (Math.max(...all.map((p) => p[1])) * 1.08 || 1);
    const { svg, x, y } = frame(container, opts, opts.xMin ?? 0, xmax, opts.yMin ?? 0, ymax);
    dots(svg, cloud, x, y, opts.dotColor || "#94a3b8", opts.dotSize || 4, opts.dotSize ? 1 : 0.55);
    series.forEach((s, i) => {
      if (!s.points.length) return;
      let d = "", prev = null;
      for (const [px, py] of s.points) {
        if (prev === null) d += `M${x(px).toFixed(1)} ${y(py).toFixed(1)}`;
        else if (s.step) d += `H${x(px).toFixed(1)}V${y(py).toFixed(1)}`;
        else d += `L${x(px).toFixed(1)} ${y(py).toFixed(1)}`;
        prev = py;
      }
      el("path", { d, fill: "none", stroke: s.color || PALETTE[i % PALETTE.length],
                   "stroke-width": s.width || 2, "stroke-linejoin": "round",
                   opacity: s.opacity ?? 1 }, svg);
    });
    for (const m of marks) dots(svg, [[m.x, m.y]], x, y, m.color || PALETTE[3], 11, 1);
  }

  // points: [[x, y], ...] on an x axis fitted to the data (scores of any sign and scale),
  // a y axis from 0 (GFLOP/s).
  function scatter(container, opts) {
    const pts = opts.points || [];
    if (!pts.length) { container.innerHTML = `<div class="empty">${opts.empty || "no data yet"}</div>`; return; }
    const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
    const xmin = Math.min(...xs), xmax = Math.max(...xs), ymax = Math.max(...ys) * 1.08 || 1;
    const pad = (xmax - xmin) * 0.05 || Math.abs(xmin) * 0.05 || 1;
    const { svg, x, y } = frame(container, opts, xmin - pad, xmax + pad, 0, ymax);
    dots(svg, pts, x, y, opts.color || PALETTE[0], 6, 0.6);
  }

  // A tiny best-so-far line for the job list.
  function sparkline(container, points, color) {
    container.textContent = "";
    if (!points || points.length < 1) return;
    const w = 120, h = 28;
    const svg = el("svg", { class: "spark", viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none" }, container);
    const xmax = Math.max(...points.map((p) => p[0]), 1), ymax = Math.max(...points.map((p) => p[1]), 1e-9);
    const x = (v) => 1 + (v / xmax) * (w - 2), y = (v) => h - 2 - (v / ymax) * (h - 4);
    let d = `M${x(0)} ${y(0)}`;
    for (const [px, py] of points) d += `H${x(px).toFixed(1)}V${y(py).toFixed(1)}`;
    el("path", { d: d + `V${h}H${x(0)}Z`, fill: (color || PALETTE[0]) + "1f", stroke: "none" }, svg);
    el("path", { d, fill: "none", stroke: color || PALETTE[0], "stroke-width": 1.5 }, svg);
  }

  return { line, scatter, sparkline, PALETTE };
})();
