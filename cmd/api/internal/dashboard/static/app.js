// The dashboard's script: it calls the API over Connect JSON with the key
// typed in (none on an open server) and draws what the API answers.
"use strict";

const ranges = {
  hour: { ms: 3600e3, granularity: "minute", step: 60e3 },
  day: { ms: 86400e3, granularity: "hour", step: 3600e3 },
  month: { ms: 30 * 86400e3, granularity: "day", step: 86400e3 },
};
let selected = null;

function key() {
  return document.getElementById("key").value.trim();
}

async function call(service, method, body) {
  const headers = { "content-type": "application/json" };
  if (key()) headers.authorization = "Bearer " + key();
  const res = await fetch(`/ratelimit.v1.${service}/${method}`, { method: "POST", headers, body: JSON.stringify(body) });
  const out = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(`${method}: ${out.message || res.status}`);
  return out;
}

function num(v) {
  return Number(v || 0);
}

function fill(id, rows) {
  const tbody = document.querySelector(`#${id} tbody`);
  tbody.replaceChildren();
  for (const cells of rows) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      if (typeof c === "number") {
        td.className = "num";
        td.textContent = c.toLocaleString("en-US");
      } else if (c && c.cls) {
        td.className = c.cls;
        td.textContent = c.text;
      } else {
        td.textContent = c;
      }
      tr.append(td);
    }
    tbody.append(tr);
  }
  return tbody;
}

function ago(ms) {
  if (ms < 0) return "never";
  if (ms < 1000) return `${ms} ms ago`;
  if (ms < 120e3) return `${(ms / 1000).toFixed(1)} s ago`;
  return `${Math.round(ms / 60e3)} min ago`;
}

function span() {
  const r = ranges[document.getElementById("range").value];
  const to = Math.ceil(Date.now() / r.step) * r.step;
  return { r, from: to - r.ms, to };
}

function drawChart(series, from, to, step) {
  const svg = document.getElementById("chart");
  svg.replaceChildren();
  const buckets = Math.max(1, Math.round((to - from) / step));
  const width = 600 / buckets;
  const peak = Math.max(1, ...series.map((p) => num(p.passed) + num(p.denied)));
  const ns = "http://www.w3.org/2000/svg";
  for (const p of series) {
    const i = Math.floor((num(p.time) - from) / step);
    let y = 160;
    for (const [cls, v] of [["passed", num(p.passed)], ["denied", num(p.denied)]]) {
      const h = (v / peak) * 150;
      const rect = document.createElementNS(ns, "rect");
      rect.setAttribute("class", cls);
      rect.setAttribute("x", String(i * width + 0.5));
      rect.setAttribute("width", String(Math.max(width - 1, 0.5)));
      rect.setAttribute("y", String(y - h));
      rect.setAttribute("height", String(h));
      svg.append(rect);
      y -= h;
    }
  }
}

async function loadNamespace(ns) {
  selected = ns;
  document.getElementById("ns-name").textContent = ns;
  for (const tr of document.querySelectorAll("#namespaces tbody tr")) {
    tr.classList.toggle("selected", tr.dataset.namespace === ns);
  }
  const { r, from, to } = span();
  const out = await call("AnalyticsService", "GetRatelimits", { namespace: ns, from, to, granularity: r.granularity, top: 10 });
  const series = out.series || [];
  let passed = 0, denied = 0;
  for (const p of series) { passed += num(p.passed); denied += num(p.denied); }
  document.getElementById("total-passed").textContent = passed.toLocaleString("en-US");
  document.getElementById("total-denied").textContent = denied.toLocaleString("en-US");
  drawChart(series, from, to, r.step);
  fill("top", (out.top || []).map((t) => [t.identifier, num(t.passed), num(t.denied)]));
  try {
    const ov = await call("RatelimitService", "ListOverrides", { namespace: ns, limit: 100 });
    fill("overrides", (ov.overrides || []).map((o) => [o.identifier, num(o.limit), `${num(o.duration) / 1000} s`]));
  } catch (e) {
    fill("overrides", [[`(${e.message})`, "", ""]]);
  }
}

async function loadFleet() {
  const st = await call("AnalyticsService", "GetStatus", {});
  const regions = new Map();
  const nodes = new Map();
  for (const p of st.processes || []) {
    const sync = num(p.lastSyncAgoMs);
    const reg = regions.get(p.region) || { n: 0, sync: -1 };
    reg.n++;
    if (sync >= 0 && (reg.sync < 0 || sync < reg.sync)) reg.sync = sync;
    regions.set(p.region, reg);
    for (const [addr, state] of Object.entries(p.redisNodes || {})) {
      const n = nodes.get(addr) || { state: "closed", by: 0 };
      if (state !== "closed") n.state = state;
      n.by++;
      nodes.set(addr, n);
    }
  }
  fill("regions", [...regions].sort().map(([name, r]) => [name, r.n, ago(r.sync)]));
  fill("redis", [...nodes].sort().map(([addr, n]) => [addr, { cls: n.state === "open" ? "open" : "closed", text: n.state }, n.by]));
}

async function load() {
  const error = document.getElementById("error");
  error.textContent = "";
  try {
    sessionStorage.setItem("key", key());
    const { from, to } = span();
    const out = await call("AnalyticsService", "ListNamespaces", { from, to });
    const list = out.namespaces || [];
    const tbody = fill("namespaces", list.map((n) => [n.namespace, num(n.passed), num(n.denied)]));
    [...tbody.children].forEach((tr, i) => {
      tr.dataset.namespace = list[i].namespace;
      tr.addEventListener("click", () => loadNamespace(list[i].namespace).catch(show));
    });
    const next = list.find((n) => n.namespace === selected) ? selected : list.length ? list[0].namespace : null;
    await Promise.all([next ? loadNamespace(next) : Promise.resolve(), loadFleet()]);
    document.body.dataset.loaded = String(Date.now());
  } catch (e) {
    show(e);
  }
}

function show(e) {
  document.getElementById("error").textContent = e.message;
  document.body.dataset.loaded = String(Date.now());
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("key").value = sessionStorage.getItem("key") || "";
  document.getElementById("controls").addEventListener("submit", (e) => {
    e.preventDefault();
    load();
  });
  document.getElementById("range").addEventListener("change", load);
  load();
  setInterval(load, 10e3);
});
