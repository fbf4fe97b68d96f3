// Shared helpers: API calls (with an optional API key), formatting, small DOM utilities.
"use strict";

const API = "/api/v1";
const KEY_STORE = "autotune_key";

const Api = {
  key() { return localStorage.getItem(KEY_STORE) || ""; },
  setKey(key) {
    localStorage.setItem(KEY_STORE, key);
    // EventSource cannot send headers: reads fall back to this cookie (writes never do).
    document.cookie = `${KEY_STORE}=${encodeURIComponent(key)}; path=/; SameSite=Strict`;
  },
  async request(method, path, body) {
    const headers = { Accept: "application/json" };
    if (Api.key()) headers.Authorization = `Bearer ${Api.key()}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(API + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    if (res.status === 401 || res.status === 403) { showKeyBox(res.status); throw new Error(`HTTP ${res.status}`); }
    if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
    return res.json();
  },
  get(path) { return Api.request("GET", path); },
  // Refreshes of one view overlap (a poll and a filter change, a debounced reload and the
  // end of a stream) and may answer out of order: an answer to anything but the newest
  // request of the same name comes back as null, so a stale page is never drawn.
  asked: new Map(),
  async latest(name, path) {
    const n = (Api.asked.get(name) || 0) + 1;
    Api.asked.set(name, n);
    const page = await Api.get(path);
    return Api.asked.get(name) === n ? page : null;
  },
  post(path, body) { return Api.request("POST", path, body); },
};

function $(sel, root) { return (root || document).querySelector(sel); }

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const Fmt = {
  gflops(v) { return v === null || v === undefined ? "–" : v >= 100 ? v.toFixed(1) : v.toFixed(2); },
  ms(cost) { return cost === null || cost === undefined ? "–" : (cost * 1e3).toFixed(cost < 1e-3 ? 4 : 3); },
  when(iso) {
    if (!iso) return "–";
    const d = new Date(iso), s = (Date.now() - d.getTime()) / 1000;
    if (s < 60) return "just now";
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return d.toLocaleDateString();
  },
  duration(a, b) {
    if (!a) return "–";
    const s = ((b ? new Date(b) : new Date()) - new Date(a)) / 1000;
    return s < 90 ? `${s.toFixed(0)} s` : s < 5400 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
  },
  target(key) {
    // "llvm -mcpu=rocketlake -cores=2 -vector-bits=512" -> "llvm rocketlake ×2"
    const m = /^(\w+)(?:.*-mcpu=(\S+))?(?:.*-cores=(\d+))?/.exec(key || "");
    if (!m) return key;
    if (m[1] === "cuda") return key.replace("-arch=", "");
    return [m[1], m[2], m[3] ? `×${m[3]}` : ""].filter(Boolean).join(" ");
  },
};

function badge(state) { return h("span", { class: `badge ${state}` }, state); }

function progressBar(done, total) {
  const pct = total ? Math.min(100, (100 * done) / total) : 0;
  return h("span", {}, h("span", { class: "bar" }, h("i", { style: `width:${pct.toFixed(1)}%` })),
           h("span", { class: "bar-label" }, `${done} / ${total}`));
}

// A job's trials: against its budget, or, for a model run's task, the trials it ran (its
// budget was what the run had left when it started, not a target of its own).
function jobTrials(job) {
  if (job.model_run === null || job.model_run === undefined) return progressBar(job.trials_done, job.trials);
  return h("span", {}, `${job.trials_done} trials `,
           h("a", { class: "muted", href: `/model-runs/${job.model_run}`, onclick: (e) => e.stopPropagation() }, `run #${job.model_run}`));
}

function showKeyBox(status) {
  const box = $("#keybox");
  if (!box) return;
  box.classList.add("show");
  $("#keyhint").textContent = status === 403 ? "that key was refused" : "an API key is needed";
}

function setupKeyBox() {
  const box = $("#keybox");
  if (!box) return;
  $("#keysave").addEventListener("click", () => {
    Api.setKey($("#keyinput").value.trim());
    location.reload();
  });
}

// The live indicator: "live" while answers come, else ``ended`` (a job's or a run's final
// state, the word its badge shows) or "reconnecting".
function setLive(on, ended) {
  const dot = $("#live-dot");
  if (dot) dot.classList.toggle("on", !!on);
  const text = $("#live-text");
  if (text) text.textContent = on ? "live" : ended || "reconnecting";
}

function showNotice(text, isError) {
  const n = $("#notice");
  if (!n) return;
  n.textContent = text || "";
  n.classList.toggle("show", !!text);
  n.classList.toggle("error", !!isError);
}
