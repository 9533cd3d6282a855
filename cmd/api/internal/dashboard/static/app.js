// The dashboard's script: it calls the API over Connect JSON with the key
// typed in (none on an open server) and draws what the API answers. Times
// are shown in the browser's time zone and locale; counts in en-US digits.
"use strict";

const ranges = {
  hour: { ms: 3600e3, granularity: "minute", step: 60e3, text: "the last hour" },
  day: { ms: 86400e3, granularity: "hour", step: 3600e3, text: "the last 24 hours" },
  month: { ms: 30 * 86400e3, granularity: "day", step: 86400e3, text: "the last 30 days" },
};
const svgNS = "http://www.w3.org/2000/svg";
const timeFmt = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const secondsFmt = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const dateFmt = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" });
const dayFmt = new Intl.DateTimeFormat(undefined, { weekday: "short", month: "short", day: "numeric" });
let selected = null;
// What the chart draws: the selected namespace's series over [from, to) in
// buckets of step, and the bucket pointed at (-1: none).
const chart = { series: new Map(), from: 0, to: 0, step: 60e3, granularity: "minute", focus: -1, layout: null };

function key() {
  return document.getElementById("key").value.trim();
}

// call posts a Connect JSON call; a refusal throws an Error carrying the
// Connect code ("unauthenticated", "permission_denied", …).
async function call(service, method, body) {
  const headers = { "content-type": "application/json" };
  if (key()) headers.authorization = "Bearer " + key();
  const res = await fetch(`/ratelimit.v1.${service}/${method}`, { method: "POST", headers, body: JSON.stringify(body) });
  const out = await res.json().catch(() => ({}));
  if (!res.ok) {
    const e = new Error(`${method}: ${out.message || res.status}`);
    e.code = out.code || "";
    throw e;
  }
  return out;
}

function num(v) {
  return Number(v || 0);
}

function count(n) {
  return n.toLocaleString("en-US");
}

function plural(n, one, many) {
  return `${count(n)} ${n === 1 ? one : many}`;
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
        td.textContent = count(c);
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
  if (ms < 1000) return `${ms} ms ago`;
  if (ms < 120e3) return `${(ms / 1000).toFixed(1)} s ago`;
  return `${Math.round(ms / 60e3)} min ago`;
}

// duration writes an interval of ms as "10 s", "200 ms" or "2 min".
function duration(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120e3) return `${ms / 1000} s`;
  return `${ms / 60e3} min`;
}

// left writes a block's time, rounded up to the second, or to the minute
// past two.
function left(ms) {
  const s = Math.max(Math.ceil(ms / 1000), 0);
  return s < 120 ? `${s} s` : `${Math.ceil(s / 60)} min`;
}

function span() {
  const r = ranges[document.getElementById("range").value];
  const to = Math.ceil(Date.now() / r.step) * r.step;
  return { r, from: to - r.ms, to };
}

// notice adds a paragraph to the notices above the panels: what the view
// shows, or why it shows nothing. Parts are strings, or {code} for a name
// to type or look up.
function notice(cls, ...parts) {
  const p = document.createElement("p");
  p.className = `notice ${cls}`;
  for (const part of parts) {
    if (typeof part === "string") {
      p.append(part);
    } else {
      const code = document.createElement("code");
      code.textContent = part.code;
      p.append(code);
    }
  }
  document.getElementById("notices").append(p);
}

// svg makes an SVG element with attributes (presentation attributes only:
// the page's policy allows no inline style).
function svg(name, attrs, text) {
  const el = document.createElementNS(svgNS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

// niceStep returns a step of 1, 2 or 5 times a power of ten (at least 1)
// that cuts 0..peak into about four.
function niceStep(peak) {
  const rough = Math.max(peak / 4, 1);
  const mag = 10 ** Math.floor(Math.log10(rough));
  for (const m of [1, 2, 5, 10]) {
    if (m * mag >= rough) return m * mag;
  }
  return 10 * mag;
}

// localUnits returns how many buckets of step the local time of t is past
// the local epoch: what a tick on whole local minutes, hours or days needs.
function localUnits(t, step) {
  const local = t - new Date(t).getTimezoneOffset() * 60e3;
  return Math.floor(local / step);
}

// utcOffset names the browser's offset at t, "UTC+05:30".
function utcOffset(t) {
  const off = -new Date(t).getTimezoneOffset();
  const a = Math.abs(off);
  return `UTC${off < 0 ? "−" : "+"}${String(Math.floor(a / 60)).padStart(2, "0")}:${String(a % 60).padStart(2, "0")}`;
}

// bucketText says which bucket starts at t, in local time: "Mar 3, 14:20–14:21".
function bucketText(t) {
  const end = t + chart.step;
  if (chart.granularity === "day") {
    const midnight = new Date(t).getHours() === 0 && new Date(t).getMinutes() === 0;
    return midnight ? dayFmt.format(t) : `${dateFmt.format(t)}, ${timeFmt.format(t)} – ${dateFmt.format(end)}, ${timeFmt.format(end)}`;
  }
  return `${dateFmt.format(t)}, ${timeFmt.format(t)}–${timeFmt.format(end)}`;
}

function unitText() {
  return { minute: "decisions per minute", hour: "decisions per hour", day: "decisions per day" }[chart.granularity];
}

// drawChart draws the chart's series with a value axis of counts and a time
// axis of local times, the bars stacked passed under denied.
function drawChart() {
  const el = document.getElementById("chart");
  const title = document.getElementById("chart-title");
  const W = Math.max(320, Math.round(el.getBoundingClientRect().width) || 600);
  const H = 220;
  const m = { left: 60, right: 12, top: 12, bottom: 42 };
  const pw = W - m.left - m.right, ph = H - m.top - m.bottom;
  el.setAttribute("viewBox", `0 0 ${W} ${H}`);
  el.replaceChildren(title);
  const buckets = Math.max(1, Math.round((chart.to - chart.from) / chart.step));
  const bw = pw / buckets;
  let peak = 0;
  for (const p of chart.series.values()) peak = Math.max(peak, p.passed + p.denied);
  const yStep = niceStep(peak);
  const yMax = Math.max(yStep, Math.ceil(peak / yStep) * yStep);
  const y = (v) => m.top + ph - (v / yMax) * ph;
  chart.layout = { m, pw, ph, bw, buckets, W, H };

  // The value axis: grid lines at each step, labelled with counts.
  const yAxis = svg("g", { class: "axis y-axis" });
  for (let v = 0; v <= yMax; v += yStep) {
    yAxis.append(svg("line", { class: "grid", x1: m.left, x2: m.left + pw, y1: y(v), y2: y(v) }));
    yAxis.append(svg("text", { class: "tick-label", x: m.left - 6, y: y(v) + 4, "text-anchor": "end", "data-value": v }, count(v)));
  }
  yAxis.append(svg("text", { class: "axis-title", x: 0, y: 0, "text-anchor": "middle",
    transform: `translate(14 ${m.top + ph / 2}) rotate(-90)` }, unitText()));
  el.append(yAxis);

  // The time axis: a tick on whole local minutes, hours or days, every k
  // buckets so that labels are at least 64 px apart.
  const choices = { minute: [1, 2, 5, 10, 15, 30, 60], hour: [1, 2, 3, 6, 12, 24], day: [1, 2, 5, 7, 10, 15, 30] }[chart.granularity];
  const k = choices.find((c) => c * bw >= 64) || choices[choices.length - 1];
  const xAxis = svg("g", { class: "axis x-axis" });
  xAxis.append(svg("line", { class: "baseline", x1: m.left, x2: m.left + pw, y1: m.top + ph, y2: m.top + ph }));
  let lastDate = "";
  for (let i = 0; i < buckets; i++) {
    const t = chart.from + i * chart.step;
    if (localUnits(t, chart.step) % k !== 0) continue;
    const x = m.left + i * bw;
    const g = svg("g", { class: "tick", "data-time": t });
    g.append(svg("line", { x1: x, x2: x, y1: m.top + ph, y2: m.top + ph + 4 }));
    const label = svg("text", { class: "tick-label", x, y: m.top + ph + 16, "text-anchor": "middle" });
    if (chart.granularity === "day") {
      label.textContent = dateFmt.format(t);
    } else {
      label.append(svg("tspan", { class: "time" }, timeFmt.format(t)));
      const date = dateFmt.format(t);
      if (date !== lastDate && chart.granularity === "hour") {
        label.append(svg("tspan", { class: "date", x, dy: 12 }, date));
      }
      lastDate = date;
    }
    g.append(label);
    xAxis.append(g);
  }
  xAxis.append(svg("text", { class: "axis-title", x: m.left + pw / 2, y: H - 4, "text-anchor": "middle" },
    `local time (${utcOffset(chart.to)})`));
  el.append(xAxis);

  // The bars, passed at the bottom.
  const bars = svg("g", { class: "bars" });
  for (const [t, p] of chart.series) {
    const i = Math.floor((t - chart.from) / chart.step);
    if (i < 0 || i >= buckets) continue;
    const g = svg("g", { class: "bar", "data-time": t, "data-index": i });
    let base = 0;
    for (const [cls, v] of [["passed", p.passed], ["denied", p.denied]]) {
      if (v > 0) {
        g.append(svg("rect", { class: cls, x: m.left + i * bw + 0.5, width: Math.max(bw - 1, 0.5),
          y: y(base + v), height: y(base) - y(base + v) }));
      }
      base += v;
    }
    bars.append(g);
  }
  el.append(bars);
  if (chart.series.size === 0) {
    el.append(svg("text", { class: "empty", x: m.left + pw / 2, y: m.top + ph / 2, "text-anchor": "middle" },
      selected ? `no decisions in ${span().r.text}` : "no namespace to show"));
  }
  let max = null;
  for (const [t, p] of chart.series) if (!max || p.passed + p.denied > max.n) max = { t, n: p.passed + p.denied };
  title.textContent = `${unitText()} of ${selected || "no namespace"}, passed and denied, ${timeFmt.format(chart.from)} to ` +
    `${timeFmt.format(chart.to)} local time` + (max ? `; the most, ${count(max.n)}, in ${bucketText(max.t)}` : "");
  drawFocus();
}

// drawFocus marks the bucket pointed at and shows its values in a tooltip
// beside it and in the readout under the chart.
function drawFocus() {
  const el = document.getElementById("chart");
  const readout = document.getElementById("chart-readout");
  el.querySelector(".focus")?.remove();
  const L = chart.layout;
  if (!L || chart.focus < 0 || chart.focus >= L.buckets) {
    readout.textContent = "Point at the chart, or focus it and use ← →, to read a bucket's values.";
    return;
  }
  const t = chart.from + chart.focus * chart.step;
  const p = chart.series.get(t) || { passed: 0, denied: 0 };
  const lines = [
    ["when", bucketText(t)],
    ["passed", `passed ${count(p.passed)}`],
    ["denied", `denied ${count(p.denied)}`],
    ["total", `total ${count(p.passed + p.denied)}`],
  ];
  readout.textContent = `${lines[0][1]}: ${lines.slice(1).map((l) => l[1]).join(", ")}`;
  const g = svg("g", { class: "focus", "data-time": t });
  const x = L.m.left + chart.focus * L.bw;
  g.append(svg("rect", { class: "hover", x, y: L.m.top, width: Math.max(L.bw, 1), height: L.ph }));
  const tip = svg("g", { class: "tooltip" });
  const bg = svg("rect", { class: "tooltip-bg", rx: 3 });
  tip.append(bg);
  const texts = lines.map(([cls, s], i) => svg("text", { class: `tooltip-${cls}`, x: 8, y: 16 + i * 15 }, s));
  tip.append(...texts);
  g.append(tip);
  el.append(g);
  const w = Math.max(...texts.map((tx) => tx.getComputedTextLength())) + 16;
  const h = 12 + lines.length * 15;
  bg.setAttribute("width", String(w));
  bg.setAttribute("height", String(h));
  let tx = x + L.bw + 6;
  if (tx + w > L.W - 2) tx = Math.max(2, x - w - 6);
  tip.setAttribute("transform", `translate(${tx} ${L.m.top + 2})`);
}

function setFocus(i) {
  chart.focus = i;
  drawFocus();
}

function bindChart() {
  const el = document.getElementById("chart");
  el.addEventListener("pointermove", (e) => {
    const L = chart.layout;
    if (!L) return;
    const box = el.getBoundingClientRect();
    const x = ((e.clientX - box.left) / box.width) * L.W;
    const i = Math.floor((x - L.m.left) / L.bw);
    setFocus(i >= 0 && i < L.buckets ? i : -1);
  });
  el.addEventListener("pointerleave", () => setFocus(-1));
  el.addEventListener("blur", () => setFocus(-1));
  el.addEventListener("focus", () => {
    if (chart.focus < 0 && chart.layout) {
      const last = [...chart.series.keys()].pop();
      setFocus(last === undefined ? chart.layout.buckets - 1 : Math.floor((last - chart.from) / chart.step));
    }
  });
  el.addEventListener("keydown", (e) => {
    const L = chart.layout;
    if (!L) return;
    const moves = { ArrowLeft: -1, ArrowRight: 1, Home: -Infinity, End: Infinity };
    if (e.key === "Escape") return setFocus(-1);
    if (!(e.key in moves)) return;
    e.preventDefault();
    const from = chart.focus < 0 ? L.buckets - 1 : chart.focus;
    setFocus(Math.min(L.buckets - 1, Math.max(0, from + moves[e.key])));
  });
  new ResizeObserver(() => chart.layout && drawChart()).observe(el);
}

function clearNamespace() {
  selected = null;
  document.getElementById("ns-name").textContent = "–";
  document.getElementById("total-passed").textContent = "0";
  document.getElementById("total-denied").textContent = "0";
  document.getElementById("total-shadow-denied").textContent = "0";
  fill("top", []);
  fill("overrides", []);
  fill("penalties", []);
  const { r, from, to } = span();
  Object.assign(chart, { series: new Map(), from, to, step: r.step, granularity: r.granularity, focus: -1 });
  drawChart();
}

async function loadNamespace(ns) {
  if (ns !== selected) chart.focus = -1;
  selected = ns;
  document.getElementById("ns-name").textContent = ns;
  for (const tr of document.querySelectorAll("#namespaces tbody tr")) {
    tr.classList.toggle("selected", tr.dataset.namespace === ns);
    tr.setAttribute("aria-selected", String(tr.dataset.namespace === ns));
  }
  const { r, from, to } = span();
  const out = await call("AnalyticsService", "GetRatelimits", { namespace: ns, from, to, granularity: r.granularity, top: 10 });
  const series = new Map();
  let passed = 0, denied = 0, shadowDenied = 0;
  for (const p of out.series || []) {
    series.set(num(p.time), { passed: num(p.passed), denied: num(p.denied) });
    passed += num(p.passed);
    denied += num(p.denied);
    shadowDenied += num(p.shadowDenied);
  }
  document.getElementById("total-passed").textContent = count(passed);
  document.getElementById("total-denied").textContent = count(denied);
  document.getElementById("total-shadow-denied").textContent = count(shadowDenied);
  Object.assign(chart, { series, from, to, step: r.step, granularity: r.granularity });
  drawChart();
  fill("top", (out.top || []).map((t) => [t.identifier, num(t.passed), num(t.denied), num(t.shadowDenied)]));
  try {
    const ov = await call("RatelimitService", "ListOverrides", { namespace: ns, limit: 100 });
    // A shadow override without a duration keeps the callers' limits.
    fill("overrides", (ov.overrides || []).map((o) => num(o.duration) === 0 ?
      [o.identifier === "*" ? "* (the whole namespace)" : o.identifier, "callers'", "callers'", "—", "shadow"] :
      [o.identifier, num(o.limit), `${num(o.duration) / 1000} s`, num(o.burst) > 0 ? num(o.burst) : "—", o.shadow ? "shadow" : "enforced"]));
  } catch (e) {
    fill("overrides", [[{ cls: "why", text: unreadable(e, ns, "overrides") }, "", "", "", ""]]);
  }
  try {
    const pe = await call("RatelimitService", "ListPenalties", { namespace: ns, limit: 100 });
    const now = Date.now();
    fill("penalties", (pe.penalties || []).map((b) => [b.identifier, left(num(b.until) - now),
      left(num(b.until) - num(b.start))]));
  } catch (e) {
    fill("penalties", [[{ cls: "why", text: unreadable(e, ns, "penalties") }, "", ""]]);
  }
}

// unreadable says why a namespace's overrides or penalties are not shown.
function unreadable(e, ns, what) {
  return e.code === "permission_denied" ?
    `Not shown: listing a namespace's ${what} needs ratelimit.${ns}.read_override, which this key lacks.` : `(${e.message})`;
}

// renderFleet fills the fleet's tables from GetStatus: the live processes
// counted per region, with the freshest last sync among them; every process
// with its last report, those gone greyed with when they were last seen; the
// Redis nodes as the live processes see them.
function renderFleet(st) {
  const now = Date.now();
  const procs = (st.processes || []).map((p) => ({ ...p, seen: num(p.seenAgoMs), sync: num(p.lastSyncAgoMs), live: p.live === true }));
  const regions = new Map();
  const nodes = new Map();
  for (const p of procs) {
    const reg = regions.get(p.region) || { n: 0, sync: -1 };
    regions.set(p.region, reg);
    if (!p.live) continue;
    reg.n++;
    if (p.sync >= 0 && (reg.sync < 0 || p.sync < reg.sync)) reg.sync = p.sync;
    for (const [addr, state] of Object.entries(p.redisNodes || {})) {
      const n = nodes.get(addr) || { state: "closed", by: 0 };
      if (state !== "closed") n.state = state;
      n.by++;
      nodes.set(addr, n);
    }
  }
  const noSync = st.analyticsInMemory ? "none (no MySQL)" : "not yet";
  fill("regions", [...regions].sort().map(([name, r]) => [name, r.n, r.n === 0 ? "–" : r.sync < 0 ? noSync : ago(r.sync)]));
  procs.sort((a, b) => (b.live - a.live) || (a.live ? a.region.localeCompare(b.region) || a.id.localeCompare(b.id) : a.seen - b.seen));
  const tbody = fill("processes", procs.map((p) => [p.id, p.region,
    p.live ? ago(p.seen) : `gone: last seen ${secondsFmt.format(now - p.seen)} (${ago(p.seen)})`]));
  [...tbody.children].forEach((tr, i) => {
    tr.className = procs[i].live ? "live" : "gone";
    tr.dataset.seenAgoMs = String(procs[i].seen);
  });
  fill("redis", [...nodes].sort().map(([addr, n]) => [addr, { cls: n.state === "open" ? "open" : "closed", text: n.state }, n.by]));
}

// clearFleet empties the fleet's tables, saying why when the key may not
// read the fleet's status (err, GetStatus's refusal).
function clearFleet(err) {
  for (const id of ["regions", "processes", "redis"]) fill(id, []);
  if (err && err.code === "permission_denied") {
    fill("processes", [[{ cls: "why", text: "Not shown: the fleet's status needs status.read, the operator's permission, which this key lacks." },
      "", ""]]);
  }
}

// explain adds the notices that say what the view holds and, when it holds
// nothing, why.
function explain(list, withheld, st) {
  const { r } = span();
  // How long a decision may take to show: the longest flush interval of
  // the processes that may have made it.
  let every = st ? num(st.flushIntervalMs) : 0;
  for (const p of (st && st.processes) || []) if (p.live) every = Math.max(every, num(p.flushIntervalMs));
  const flush = every ? `every ${duration(every)} here` : "every 10 s by default";
  if (st && st.analyticsInMemory) {
    notice("info", "This API runs without MySQL (", { code: "UNKEY_MYSQL_DSN" }, " is not set): each process counts only its own " +
      "decisions, in its memory, for 25 hours, and forgets them when it stops. This page shows the process that answered it, " +
      "not the whole fleet.");
  }
  if (list.length === 0 && withheld > 0) {
    notice("warn", `Your key may not read the analytics of the ${plural(withheld, "namespace", "namespaces")} with decisions in ` +
      `${r.text}. Reading a namespace's analytics needs the permission `, { code: "ratelimit.<namespace>.read_analytics" },
      " (", { code: "ratelimit.*.read_analytics" }, " for every namespace): ask whoever manages your keys to grant it.");
  } else if (withheld > 0) {
    notice("info", `${plural(withheld, "more namespace has", "more namespaces have")} decisions in ${r.text} that your key ` +
      "may not read: each needs its ", { code: "ratelimit.<namespace>.read_analytics" }, ".");
  } else if (list.length === 0) {
    notice("info", `No decisions recorded in ${r.text} yet. Each process adds the decisions it made to the analytics once ` +
      `every flush interval (`, { code: "UNKEY_ANALYTICS_FLUSH_INTERVAL" }, `, ${flush}), so they appear here after the first ` +
      "flush that follows them; this page reloads every 10 s.");
  }
}

async function load() {
  const error = document.getElementById("error");
  error.textContent = "";
  document.getElementById("notices").replaceChildren();
  try {
    sessionStorage.setItem("key", key());
    const { from, to } = span();
    const [names, status] = await Promise.allSettled([
      call("AnalyticsService", "ListNamespaces", { from, to }),
      call("AnalyticsService", "GetStatus", {}),
    ]);
    if (names.status === "rejected" && names.reason.code === "unauthenticated") {
      fill("namespaces", []);
      clearNamespace();
      clearFleet();
      if (key()) {
        notice("warn", `The API refused this key (${names.reason.message.replace(/^ListNamespaces: /, "")}). ` +
          "Check the key in the API key box above and press Load.");
      } else {
        notice("warn", "This API needs a key to show its analytics. Type your API key into the API key box above and press Load.");
      }
      return;
    }
    const st = status.status === "fulfilled" ? status.value : null;
    if (names.status === "rejected" && names.reason.code === "permission_denied") {
      // The API refuses ListNamespaces to a key that may read no
      // namespace's analytics, before it looks at any.
      fill("namespaces", []);
      clearNamespace();
      if (st) renderFleet(st); else clearFleet(status.reason);
      notice("warn", "Your key may not read the analytics of any namespace. Reading a namespace's analytics needs the permission ",
        { code: "ratelimit.<namespace>.read_analytics" }, " (", { code: "ratelimit.*.read_analytics" },
        " for every namespace): ask whoever manages your keys to grant it.");
      return;
    }
    if (names.status === "rejected") throw names.reason;
    const list = names.value.namespaces || [];
    explain(list, num(names.value.withheld), st);
    const tbody = fill("namespaces", list.map((n) => [n.namespace, num(n.passed), num(n.denied)]));
    [...tbody.children].forEach((tr, i) => {
      tr.dataset.namespace = list[i].namespace;
      tr.tabIndex = 0;
      const pick = () => loadNamespace(list[i].namespace).catch(show);
      tr.addEventListener("click", pick);
      tr.addEventListener("keydown", (e) => (e.key === "Enter" || e.key === " ") && (e.preventDefault(), pick()));
    });
    const next = list.find((n) => n.namespace === selected) ? selected : list.length ? list[0].namespace : null;
    if (st) renderFleet(st);
    else clearFleet(status.reason);
    if (next) await loadNamespace(next);
    else clearNamespace();
    if (!st && status.reason.code !== "permission_denied") throw status.reason;
  } catch (e) {
    show(e);
  } finally {
    document.body.dataset.loaded = String(Date.now());
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
  bindChart();
  load();
  setInterval(load, 10e3);
});
