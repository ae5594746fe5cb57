// The statefulbolts dashboard: fetches the topology picture once, then polls the live figures
// (api/snapshot) every second and redraws. No build step: plain DOM and SVG, and uPlot (vendored
// beside this file, MIT) for the history charts. Every text from the server goes in with
// textContent, never as HTML.
"use strict";

const REFRESH_MS = 1000;
const SVG_NS = "http://www.w3.org/2000/svg";
const TIMELINE_BARS = 60;
const ACTION_COLORS = {
  PREPARE: "#2f6fde",
  COMMIT: "#1f9d55",
  ROLLBACK: "#e07b00",
  INITSTATE: "#7a68b8",
  EMIT: "#0f8b8d",
  PROCESS: "#3aa6a8",
  BATCH: "#7d8799",
};
const FAILED_COLOR = "#d64545";
const SIZE_COLORS = ["#d98a00", "#2f6fde", "#1f9d55", "#7a68b8", "#0f8b8d", "#c2417a"];
// Components with at most this many tasks start expanded into their task rows.
const EXPANDED_TASKS = 8;

let graph = null;
let latest = null;
// The window the rates and capacity are shown over: "1m" or "10m" (api/snapshot's names).
let rateWindow = "1m";
// Components whose task rows are open, as the reader left them (first seen: EXPANDED_TASKS).
const expanded = new Map();

// ---------------------------------------------------------------- small helpers
function $(id) {
  return document.getElementById(id);
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  if (text !== undefined) node.textContent = text;
  return node;
}

function setAttrs(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(key, value === true ? "" : String(value));
  }
}

function setText(id, text) {
  $(id).textContent = text;
}

function fmtInt(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 1 : 0)} ms`;
  if (s < 120) return `${s.toFixed(2)} s`;
  const m = Math.floor(s / 60);
  return m < 120 ? `${m} min ${Math.round(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

function fmtLatency(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms < 1 ? `${(ms * 1000).toFixed(ms < 0.01 ? 1 : 0)} µs` : `${ms.toFixed(ms < 10 ? 2 : 1)} ms`;
}

function fmtRate(r) {
  if (r === null || r === undefined) return "–";
  if (r === 0) return "0";
  if (r < 10) return r.toFixed(2);
  if (r < 1000) return r.toFixed(1);
  return Math.round(r).toLocaleString("en-US");
}

function fmtCapacity(c) {
  return c === null || c === undefined ? "–" : c.toFixed(3);
}

function capacityClass(c) {
  if (c === null || c === undefined) return "num";
  return c >= 0.8 ? "num fail" : c >= 0.5 ? "num warn" : "num";
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  if (n < 10 * 1024) return `${Math.round(n).toLocaleString("en-US")} B`;
  if (n < 10 * 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

// A duration axis tick (powers of ten): 10 s, 100 ms, 1 ms, 10 µs.
function fmtAxisSeconds(s) {
  const round = (v) => Number(v.toPrecision(3));
  if (s >= 1) return `${round(s)} s`;
  if (s >= 0.001) return `${round(s * 1000)} ms`;
  return `${round(s * 1e6)} µs`;
}

// The powers of ten between a log scale's ends: its ticks and grid lines.
function decades(u, axis, min, max) {
  const out = [];
  for (let p = Math.ceil(Math.log10(min)); p <= Math.floor(Math.log10(max)); p++) out.push(10 ** p);
  return out;
}

function windowLabel(name) {
  return name === "10m" ? "10 min" : "1 min";
}

function fmtClock(unix) {
  return new Date(unix * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

function kindClass(kind) {
  if (kind === "checkpoint spout") return "system";
  if (kind.includes("spout")) return "spout";
  if (kind === "stateful bolt" || kind === "committer") return "stateful";
  return "bolt";
}

// ---------------------------------------------------------------- the topology picture
function drawTopology() {
  const root = $("topology");
  root.replaceChildren();
  const w = graph.node_width;
  const h = graph.node_height;
  root.setAttribute("width", graph.width);
  root.setAttribute("height", graph.height);
  root.setAttribute("viewBox", `0 0 ${graph.width} ${graph.height}`);
  const defs = svg("defs");
  for (const [id, color] of [["arrow", "#7d8799"], ["arrow-cp", "#a99bd6"]]) {
    const marker = svg("marker", {
      id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
      orient: "auto-start-reverse",
    });
    marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: color }));
    defs.append(marker);
  }
  root.append(defs);
  const at = Object.fromEntries(graph.nodes.map((n) => [n.id, n]));
  const ports = edgePorts(at, h);
  const edges = svg("g", { class: "edges" });
  const labels = svg("g", { class: "labels" });
  graph.edges.forEach((e, i) => {
    const a = at[e.source];
    const b = at[e.target];
    const x1 = a.x + w;
    const y1 = ports.out[i];
    const x2 = b.x - 2;
    const y2 = ports.in[i];
    const bend = Math.max(40, (x2 - x1) / 2);
    const cls = e.checkpoint ? "edge checkpoint" : "edge";
    const g = svg("g", { class: cls, "data-source": e.source, "data-target": e.target });
    g.append(svg("path", {
      d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`,
      "marker-end": e.checkpoint ? "url(#arrow-cp)" : "url(#arrow)",
    }, undefined));
    g.append(svg("title", {}, `${e.source} → ${e.target}: ${e.streams.join(", ")}`));
    edges.append(g);
    if (e.checkpoint) return; // the legend explains the dashed barrier edges
    const lx = bezier(x1, x1 + bend, x2 - bend, x2, 0.5);
    const ly = bezier(y1, y1, y2, y2, 0.5);
    const lg = svg("g", { class: cls });
    const text = svg("text", { x: lx, y: ly + 4, "text-anchor": "middle" }, e.label);
    lg.append(svg("rect", { class: "label-bg", rx: 4 }), text);
    labels.append(lg);
  });
  root.append(edges);
  const nodes = svg("g", { class: "nodes" });
  for (const n of graph.nodes) {
    const g = svg("g", {
      class: `node ${kindClass(n.kind)}`,
      "data-component": n.id,
      "data-parallelism": n.parallelism,
      transform: `translate(${n.x},${n.y})`,
    });
    g.append(svg("rect", { class: "box", width: w, height: h, rx: 9 }));
    g.append(svg("text", { class: "title", x: 12, y: 22 }, n.id));
    const phase = n.phase ? ` · ${n.phase} phase` : "";
    g.append(svg("text", { class: "kind", x: 12, y: 40 }, `${n.kind}${phase}`));
    g.append(svg("text", { class: "stat", x: 12, y: 60, id: `stat-${n.id}` }, ""));
    const pill = svg("g", { transform: `translate(${w - 44},29)` });
    pill.append(svg("rect", { class: "pill", width: 36, height: 18, rx: 9 }));
    pill.append(svg("text", { class: "tasks", x: 18, y: 13, "text-anchor": "middle" }, `×${n.parallelism}`));
    const tip = svg("title", {}, `${n.id}: ${n.parallelism} task${n.parallelism === 1 ? "" : "s"}`);
    pill.append(tip);
    g.append(pill);
    nodes.append(g);
  }
  root.append(nodes);
  root.append(labels);
  // Size each label's background to its text, now that the text is laid out.
  for (const lg of labels.children) {
    const text = lg.querySelector("text");
    const box = text.getBBox();
    const rect = lg.querySelector("rect");
    setAttrs(rect, { x: box.x - 4, y: box.y - 2, width: box.width + 8, height: box.height + 4 });
  }
}

// Where each edge leaves its source and enters its target: a box's edges are spread evenly
// down its side, in the order of the boxes at their other ends, so they neither meet nor cross
// at the box.
function edgePorts(at, h) {
  const out = {};
  const inn = {};
  const spread = (groups, result, other) => {
    for (const list of Object.values(groups)) {
      list.sort((p, q) => at[other(p.e)].y - at[other(q.e)].y || p.i - q.i);
      list.forEach((p, k) => {
        result[p.i] = p.y + (h * (k + 1)) / (list.length + 1);
      });
    }
  };
  const bySource = {};
  const byTarget = {};
  graph.edges.forEach((e, i) => {
    (bySource[e.source] = bySource[e.source] || []).push({ e, i, y: at[e.source].y });
    (byTarget[e.target] = byTarget[e.target] || []).push({ e, i, y: at[e.target].y });
  });
  spread(bySource, out, (e) => e.target);
  spread(byTarget, inn, (e) => e.source);
  return { out, in: inn };
}

function bezier(p0, p1, p2, p3, t) {
  const u = 1 - t;
  return u * u * u * p0 + 3 * u * u * t * p1 + 3 * u * t * t * p2 + t * t * t * p3;
}

function updateNodeStats(components) {
  for (const c of components) {
    const node = document.getElementById(`stat-${c.id}`);
    if (!node) continue;
    if (c.kind.includes("spout") && c.kind !== "transactional spout") {
      node.textContent = c.kind === "checkpoint spout"
        ? "drives the checkpoints"
        : `emitted ${fmtInt(c.emitted)} · acked ${fmtInt(c.acked)}`;
    } else {
      const failed = c.failed ? ` · failed ${fmtInt(c.failed)}` : "";
      node.textContent = `executed ${fmtInt(c.executed)}${failed}`;
    }
  }
}

// ---------------------------------------------------------------- the figures
function render(s) {
  document.title = `${s.topology} · statefulbolts`;
  setText("topology-name", s.topology);
  setText("kind", s.kind);
  const state = $("state");
  state.textContent = s.state;
  state.className = `badge ${s.state}`;
  $("stale").hidden = !s.stale;
  setText("updated", `updated ${fmtClock(s.at)}`);
  const fatal = $("fatal");
  fatal.hidden = !s.error;
  fatal.textContent = s.error ? `The topology stopped: ${s.error}` : "";
  latest = s;
  renderCards(s);
  // Sections are rebuilt only when their figures changed: an idle topology's page stays still.
  whenChanged("components", [s.components, rateWindow, [...expanded]], () => {
    renderComponents(s.components);
    updateNodeStats(s.components);
  });
  whenChanged("history", s.history, () => renderHistory(s.history));
  whenChanged("transactions", s.transactions, () => renderTransactions(s.transactions));
  whenChanged("recoveries", [s.recoveries, s.recovery_counts], () => renderRecoveries(s));
  whenChanged("errors", s.errors, () => renderErrors(s.errors));
  whenChanged("dead-letters", s.dead_letters, () => renderDeadLetters(s.dead_letters));
}

const drawn = new Map();

function whenChanged(section, data, draw) {
  const key = JSON.stringify(data);
  if (drawn.get(section) === key) return;
  draw();
  drawn.set(section, key);
}

function renderCards(s) {
  setText("phase", s.phase);
  setText("committed-txid", s.committed_txid === null ? "none" : s.committed_txid);
  setText("tx-counts", `${fmtInt(s.committed)} commits · ${fmtInt(s.failed_transactions)} failed`);
  renderThroughput(s);
  const bp = s.backpressure || {};
  const limit = bp.limit ? ` / ${fmtInt(bp.limit)}` : "";
  const full = bp.fill === null || bp.fill === undefined ? "" : ` · ${Math.round(bp.fill * 100)}% of the limit`;
  const fill = $("pending-fill");
  fill.style.width = `${Math.min(100, Math.round((bp.fill || 0) * 100))}%`;
  fill.className = `fill${bp.fill >= 0.9 ? " full" : ""}`;
  if (s.kind === "transactional") {
    const active = Object.keys((s.status && s.status.active) || {});
    setText("pending-label", "Active txids");
    setText("pending", `${active.length}${limit}`);
    setText("pending-sub", (active.length ? `txids ${active.join(", ")}` : "none in flight") + full);
  } else {
    setText("pending-label", "Pending trees");
    setText("pending", `${fmtInt(s.pending_trees)}${limit}`);
    const bound = bp.limit ? full : " · no limit (topology.max.spout.pending)";
    setText("pending-sub", `awaiting commit: ${fmtInt((s.status || {}).awaiting_commit)}${bound}`);
  }
  const b = s.backend;
  const backend = $("backend");
  backend.textContent = b.down ? "DOWN" : "ok";
  backend.className = `value ${b.down ? "bad" : "good"}`;
  setText("backend-sub", `${fmtInt(b.errors)} errors · outage ${fmtSeconds(b.outage_seconds)}`);
  const lags = Object.entries(s.spout_lag);
  setText("lag", lags.length ? fmtInt(lags.reduce((sum, [, v]) => sum + v, 0)) : "–");
  const parts = s.partition_lag || {};
  const gaps = s.spout_gaps || {};
  const lagOf = ([k, v]) => {
    const byPartition = Object.entries(parts[k] || {}).map(([p, n]) => `${p} ${fmtInt(n)}`);
    const jumped = gaps[k] ? ` · ${fmtInt(gaps[k])} gaps` : "";
    return `${k}: ${fmtInt(v)}${byPartition.length ? ` (${byPartition.join(", ")})` : ""}${jumped}`;
  };
  setText("lag-sub", lags.length ? lags.map(lagOf).join(" · ") : "no spout reports a lag");
  setText("uptime", fmtSeconds(s.uptime_seconds));
  const spark = $("spark-ui");
  if (s.spark_ui) {
    spark.replaceChildren("Spark UI: ", el("a", { href: s.spark_ui, target: "_blank", rel: "noopener" }, s.spark_ui));
  } else {
    spark.textContent = "Spark UI: disabled (spark.ui.enabled = false)";
  }
}

function renderThroughput(s) {
  for (const node of document.querySelectorAll(".window-name")) {
    node.textContent = `· ${windowLabel(rateWindow)}`;
  }
  const total = ((s.rates || {}).total || {})[rateWindow];
  if (!total || total.emitted === null) {
    setText("throughput", "–");
    setText("throughput-sub", "measuring: rates need two samples");
    return;
  }
  setText("throughput", `${fmtRate(total.emitted)}/s`);
  if (s.kind === "transactional") {
    setText("throughput-sub", `executed ${fmtRate(total.executed)}/s`);
  } else {
    setText("throughput-sub", `trees acked ${fmtRate(total.acked)}/s · failed ${fmtRate(total.failed)}/s`);
  }

}

function isExpanded(c) {
  if (!expanded.has(c.id)) expanded.set(c.id, c.tasks.length > 1 && c.tasks.length <= EXPANDED_TASKS);
  return expanded.get(c.id);
}

function rateCells(rates, capacity) {
  const r = (rates || {})[rateWindow] || {};
  const cap = (capacity || {})[rateWindow];
  return [
    el("td", { class: `${capacityClass(cap)} rate`, "data-capacity": cap === null || cap === undefined ? null : cap }, fmtCapacity(cap)),
    el("td", { class: "num rate" }, fmtRate(r.emitted)),
    el("td", { class: "num rate" }, fmtRate(r.acked)),
    el("td", { class: `num rate${r.failed ? " fail" : ""}` }, fmtRate(r.failed)),
    el("td", { class: "num rate" }, fmtRate(r.executed)),
  ];
}

function renderComponents(components) {
  const body = $("components").tBodies[0];
  body.replaceChildren();
  for (const c of components) {
    const latency = fmtLatency(c.latency_ms);
    const tasks = c.tasks || [];
    const open = tasks.length > 0 && isExpanded(c);
    const name = el("td", { class: "action" });
    if (tasks.length) {
      const toggle = el("button", {
        type: "button", class: `toggle${open ? " open" : ""}`, "aria-expanded": open ? "true" : "false",
        "aria-label": `${open ? "hide" : "show"} the tasks of ${c.id}`, title: `${tasks.length} task${tasks.length === 1 ? "" : "s"}`,
      });
      toggle.addEventListener("click", () => {
        expanded.set(c.id, !open);
        if (latest) render(latest);
      });
      name.append(toggle);
    }
    name.append(c.id);
    body.append(el("tr", { "data-component": c.id, "data-parallelism": c.parallelism, class: "component" },
      name,
      el("td", {}, c.kind),
      el("td", { class: "num" }, c.parallelism === null ? "–" : c.parallelism),
      el("td", { class: "num" }, fmtInt(c.executed)),
      el("td", { class: "num" }, fmtInt(c.emitted)),
      el("td", { class: "num" }, fmtInt(c.acked)),
      el("td", { class: `num${c.failed ? " fail" : ""}` }, fmtInt(c.failed)),
      el("td", { class: "num" }, fmtInt(c.replayed)),
      el("td", { class: `num${c.errors ? " fail" : ""}` }, fmtInt(c.errors)),
      el("td", { class: `num${c.dead_lettered ? " fail" : ""}` }, fmtInt(c.dead_lettered)),
      el("td", { class: "num" }, latency),
      ...rateCells(c.rates, c.capacity)));
    // Metrics its tasks registered (a sink's records published, ...), summed since the start.
    const metrics = Object.entries(c.metrics || {});
    if (metrics.length) {
      const text = metrics.map(([k, v]) => `${k} ${Number.isInteger(v) ? fmtInt(v) : v.toFixed(3)}`);
      body.append(el("tr", { class: "metrics", "data-metrics-of": c.id },
        el("td", { class: "muted", colspan: "16" }, text.join(" · "))));
    }
    if (!open) continue;
    for (const t of tasks) {
      const pending = t.pending === null || t.pending === undefined ? "" : `pending ${fmtInt(t.pending)}`;
      body.append(el("tr", { class: "task", "data-task-of": c.id, "data-task": t.task, "data-index": t.index },
        el("td", { class: "task-name" }, `task ${t.task}`),
        el("td", { class: "muted" }, pending || `#${t.index}`),
        el("td", {}, ""),
        el("td", { class: "num" }, fmtInt(t.executed)),
        el("td", { class: "num" }, fmtInt(t.emitted)),
        el("td", { class: "num" }, fmtInt(t.acked)),
        el("td", { class: `num${t.failed ? " fail" : ""}` }, fmtInt(t.failed)),
        el("td", {}, ""),
        el("td", {}, ""),
        el("td", {}, ""),
        el("td", { class: "num" }, fmtLatency(t.latency_ms)),
        ...rateCells(t.rates, t.capacity)));
    }
  }
  const span = latest && ((latest.rates || {}).spans || {})[rateWindow];
  const note = span === null || span === undefined ? "rates: measuring" : `rates and capacity over the last ${windowLabel(rateWindow)}${span < ((latest.rates.windows || {})[rateWindow] || 0) ? ` (${fmtSeconds(span)} so far)` : ""}`;
  setText("components-note", `${note} · capacity: busy time / wall time`);
}

// ---------------------------------------------------------------- the history charts
const charts = new Map();

function chartWidth(root) {
  return Math.max(280, root.clientWidth || root.parentElement.clientWidth - 32);
}

// Draw (or redraw) one uPlot chart in ``root``: x is Unix seconds, one series per name; ``y``
// is the y scale's options, ``splits`` the y ticks (uPlot's own when undefined).
function drawChart(root, key, series, data, yLabel, yFormat, y, splits) {
  const signature = JSON.stringify(series.map((s) => s.label));
  let chart = charts.get(key);
  if (chart && chart.signature !== signature) {
    chart.plot.destroy();
    chart = null;
  }
  root.setAttribute("data-points", data[0].length);
  root.setAttribute("data-series", series.map((s) => s.label).join(","));
  if (chart) {
    chart.plot.setData(data);
    return;
  }
  root.replaceChildren();
  const opts = {
    width: chartWidth(root),
    height: 170,
    legend: { live: false },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true }, y },
    axes: [
      { stroke: "#6b7385", grid: { stroke: "#eef1f5" }, ticks: { stroke: "#dfe3ea" } },
      {
        stroke: "#6b7385", grid: { stroke: "#eef1f5" }, ticks: { stroke: "#dfe3ea" }, size: 64,
        label: yLabel, labelSize: 16, splits,
        // uPlot hands ticks it leaves unlabelled (no room) as null.
        values: (u, ticks) => ticks.map((v) => (v === null ? null : yFormat(v))),
      },
    ],
    series: [{ label: "time" }, ...series],
  };
  const plot = new uPlot(opts, data, root);
  charts.set(key, { plot, signature });
}

function renderHistory(history) {
  renderDurations(history.durations || []);
  renderStateKeys(history.state_keys || {});
  renderSizes(history.checkpoint_sizes || {});
}

function renderDurations(points) {
  const root = $("chart-durations");
  const actions = [];
  for (const p of points) if (p.ok && !actions.includes(p.action)) actions.push(p.action);
  const failed = points.some((p) => !p.ok);
  const xs = points.map((p) => p.at);
  // A log scale: a recovery's seconds and a commit's milliseconds on one chart (never 0).
  const column = (keep) => points.map((p) => (keep(p) ? Math.max(p.seconds, 1e-6) : null));
  // A frequent action reads as a line; a rare one (a recovery's) as its points alone.
  const series = actions.map((a) => {
    const n = points.filter((p) => p.ok && p.action === a).length;
    const color = ACTION_COLORS[a] || "#7d8799";
    const line = n >= 8 ? { width: 1.5, spanGaps: true } : { width: 0, paths: () => null };
    return { label: a, stroke: color, ...line, points: { show: true, size: n >= 8 ? 4 : 7, fill: color } };
  });
  const data = [xs, ...actions.map((a) => column((p) => p.ok && p.action === a))];
  if (failed) {
    series.push({ label: "failed", stroke: FAILED_COLOR, width: 0, paths: () => null, points: { show: true, size: 8, fill: FAILED_COLOR } });
    data.push(column((p) => !p.ok));
  }
  setText("durations-note", points.length ? `the last ${points.length}, by action` : "none yet");
  drawChart(root, "durations", series, data, "duration", fmtAxisSeconds, { distr: 3 }, decades);
}

function renderSizes(sizes) {
  const root = $("chart-sizes");
  const components = Object.keys(sizes);
  $("no-sizes").hidden = components.length > 0;
  root.hidden = components.length === 0;
  if (!components.length) return;
  const series = components.map((cid, k) => ({
    label: cid, stroke: SIZE_COLORS[k % SIZE_COLORS.length], width: 1.5, spanGaps: true,
    points: { show: true, size: 4, fill: SIZE_COLORS[k % SIZE_COLORS.length] },
  }));
  const top = (u, min, max) => [0, max > 0 ? max * 1.15 : 1];
  drawChart(root, "sizes", series, alignSeries(sizes), "bytes", fmtBytes, { range: top });
}

// One x per distinct time across the components; each component's values at its own times
// (null elsewhere: the lines span the gaps). ``points`` are [at, txid, value] per component.
function alignSeries(byComponent) {
  const components = Object.keys(byComponent);
  const rows = [];
  components.forEach((cid, k) => {
    for (const [at, , value] of byComponent[cid]) rows.push({ at, value, k });
  });
  rows.sort((a, b) => a.at - b.at || a.k - b.k);
  const xs = [];
  const ys = components.map(() => []);
  for (const r of rows) {
    if (!xs.length || xs[xs.length - 1] !== r.at) {
      xs.push(r.at);
      for (const y of ys) y.push(null);
    }
    ys[r.k][xs.length - 1] = r.value;
  }
  return [xs, ...ys];
}

function fmtKeys(n) {
  return n === null || n === undefined ? "unknown" : `${fmtInt(n)} key${n === 1 ? "" : "s"}`;
}

// The committed keys of each stateful component over time. A provider that cannot count
// (``committed_key_counts`` gives None) makes its points null: said in words, never drawn as 0.
function renderStateKeys(keys) {
  const root = $("chart-keys");
  const note = $("no-keys");
  const all = Object.keys(keys);
  const known = all.filter((cid) => keys[cid].some(([, , n]) => n !== null));
  const unknown = all.filter((cid) => !known.includes(cid));
  root.hidden = known.length === 0;
  note.hidden = unknown.length === 0 && all.length > 0;
  if (!all.length) {
    note.textContent = "No state size yet: each stateful component's committed keys are counted after a commit.";
  } else if (unknown.length) {
    note.textContent = `State size unknown for ${unknown.join(", ")}: the state provider cannot count its keys (StateProvider.committed_key_counts).`;
  }
  root.setAttribute("data-unknown", unknown.join(","));
  const last = (cid) => {
    const points = keys[cid];
    return points.length ? points[points.length - 1][2] : null;
  };
  setText("keys-note", all.length
    ? all.map((cid) => `${cid}: ${fmtKeys(last(cid))}`).join(" · ")
    : "committed keys per component");
  if (!known.length) return;
  const shown = Object.fromEntries(known.map((cid) => [cid, keys[cid]]));
  root.setAttribute("data-last", known.map((cid) => `${cid}=${last(cid) === null ? "" : last(cid)}`).join(","));
  const series = known.map((cid, k) => ({
    label: cid, stroke: SIZE_COLORS[k % SIZE_COLORS.length], width: 1.5, spanGaps: true,
    points: { show: true, size: 4, fill: SIZE_COLORS[k % SIZE_COLORS.length] },
  }));
  const top = (u, min, max) => [0, max > 0 ? max * 1.15 : 1];
  drawChart(root, "keys", series, alignSeries(shown), "keys", fmtInt, { range: top });
}

const CHART_ROOTS = { durations: "chart-durations", keys: "chart-keys", sizes: "chart-sizes" };

window.addEventListener("resize", () => {
  for (const [key, chart] of charts) {
    const root = $(CHART_ROOTS[key]);
    chart.plot.setSize({ width: chartWidth(root), height: 170 });
  }
});

function chooseWindow(name) {
  rateWindow = name;
  for (const b of document.querySelectorAll(".window-switch button")) {
    b.classList.toggle("on", b.dataset.window === name);
  }
  const url = new URL(window.location.href);
  url.searchParams.set("window", name);
  window.history.replaceState(null, "", url);
  if (latest) render(latest);
}

for (const button of document.querySelectorAll(".window-switch button")) {
  button.addEventListener("click", () => chooseWindow(button.dataset.window));
}
// A link may name the window: ?window=10m.
const asked = new URLSearchParams(window.location.search).get("window");
if (asked === "1m" || asked === "10m") chooseWindow(asked);

function renderTransactions(txs) {
  drawTimeline(txs.slice(0, TIMELINE_BARS).reverse());
  const body = $("transactions").tBodies[0];
  body.replaceChildren();
  for (const t of txs.slice(0, 25)) {
    const action = t.action || "BATCH";
    const outcome = t.ok ? "ok" : "failed";
    const phases = Object.entries(t.phases || {}).map(([k, v]) => `${k} ${fmtSeconds(v)}`).join(", ");
    body.append(el("tr", { "data-txid": t.txid, "data-action": action, "data-outcome": outcome, class: t.ok ? null : "failed" },
      el("td", { class: "num" }, t.txid),
      el("td", { class: "action" }, action + (t.recovery ? " (recovery)" : "")),
      el("td", { class: "num", title: phases || null }, fmtSeconds(t.seconds)),
      el("td", { class: "num" }, fmtInt(t.tuples)),
      el("td", { class: "num" }, fmtInt(t.acked)),
      el("td", { class: "num" }, fmtInt(t.failed)),
      el("td", { class: t.ok ? "ok" : "fail", title: t.error || null }, t.ok ? "ok" : `failed: ${t.error || ""}`),
      el("td", { class: "muted" }, fmtClock(t.at))));
  }
  setText("tx-note", txs.length ? `the last ${Math.min(txs.length, TIMELINE_BARS)}, oldest on the left` : "none yet");
  setText("tx-breakdown", breakdownText(txs));
}

// Where the time of the recent PREPAREs went (their ``phases``, means; docs/protocol/engine.md):
// waiting in the buffer, the driver (with the stateless head it ran itself), Spark, and inside
// Spark the tasks' own parts. A PREPARE cut when its first task asked also has what came before
// the cut (``scheduled``) and the cut with its sealing (``feed``, within Spark's part).
const BREAKDOWN = [
  ["waited", "waited"], ["build", "build"], ["head", "driver head"], ["engine", "engine"],
  ["spark", "Spark"], ["scheduled", "of it before the cut"], ["feed", "the cut"],
  ["task_setup", "tasks: setup"], ["task_execute", "execute"], ["task_output", "output"],
  ["settle", "settle"],
];
const LATE_ONLY = new Set(["scheduled", "feed"]);

function breakdownText(txs) {
  const prepares = txs.filter((t) => t.action === "PREPARE" && t.ok && t.phases && "spark" in t.phases);
  if (!prepares.length) return "";
  const mean = (k) => prepares.reduce((sum, t) => sum + (t.phases[k] || 0), 0) / prepares.length;
  const shown = BREAKDOWN.filter(([k]) => !LATE_ONLY.has(k) || prepares.some((t) => k in t.phases));
  const parts = shown.map(([k, label]) => `${label} ${fmtSeconds(mean(k))}`);
  return `where a PREPARE's time went (mean of the last ${prepares.length}): ${parts.join(", ")}`;
}

function drawTimeline(txs) {
  const root = $("timeline");
  root.replaceChildren();
  const width = Math.max(400, root.parentElement.clientWidth - 4);
  const height = 110;
  const base = height - 18;
  root.setAttribute("width", width);
  root.setAttribute("height", height);
  root.setAttribute("viewBox", `0 0 ${width} ${height}`);
  root.append(svg("line", { x1: 0, y1: base, x2: width, y2: base, stroke: "#dfe3ea" }));
  const longest = Math.max(0.001, ...txs.map((t) => t.seconds));
  const step = width / TIMELINE_BARS;
  txs.forEach((t, i) => {
    const action = t.action || "BATCH";
    const barHeight = Math.max(3, (base - 8) * Math.sqrt(t.seconds / longest));
    const x = i * step + 2;
    const bar = svg("rect", {
      x, y: base - barHeight, width: step - 4, height: barHeight, rx: 2,
      fill: t.ok ? (ACTION_COLORS[action] || "#7d8799") : FAILED_COLOR,
      "data-txid": t.txid,
      "data-action": action,
    });
    bar.append(svg("title", {}, `${action}(${t.txid}) ${t.ok ? "ok" : "FAILED"} in ${fmtSeconds(t.seconds)}, ${t.tuples} tuples`));
    root.append(bar);
    if (txs.length <= 30 || i % 5 === 0) {
      root.append(svg("text", { x: x + (step - 4) / 2, y: height - 4, "text-anchor": "middle", "font-size": 10, fill: "#6b7385" }, t.txid));
    }
  });
  root.append(svg("text", { x: width - 4, y: 12, "text-anchor": "end", "font-size": 11, fill: "#6b7385" }, `tallest: ${fmtSeconds(longest)} (height ∝ √duration)`));
  const legend = $("legend");
  const seen = new Set(txs.map((t) => t.action || "BATCH"));
  legend.replaceChildren();
  for (const [action, color] of Object.entries(ACTION_COLORS)) {
    if (!seen.has(action)) continue;
    legend.append(el("span", {}, swatch(color), action));
  }
  if (txs.some((t) => !t.ok)) legend.append(el("span", {}, swatch(FAILED_COLOR), "failed"));
}

function swatch(color) {
  const s = el("span", { class: "swatch" });
  s.style.background = color;
  return s;
}

function renderRecoveries(s) {
  const body = $("recoveries").tBodies[0];
  body.replaceChildren();
  for (const r of s.recoveries.slice(0, 15)) {
    body.append(el("tr", { "data-kind": r.kind, "data-txid": r.txid },
      el("td", { class: "muted" }, fmtClock(r.at)),
      el("td", { class: "action" }, r.kind),
      el("td", { class: "num" }, r.txid),
      el("td", { class: r.ok ? "ok" : "fail" }, r.ok ? "ok" : "failed"),
      el("td", { class: "cause", title: r.cause || null }, r.cause || "")));
  }
  $("no-recoveries").hidden = s.recoveries.length > 0;
  const counts = Object.entries(s.recovery_counts).map(([k, v]) => `${k} ${v}`).join(" · ");
  setText("recovery-counts", counts);
}

function renderDeadLetters(d) {
  const body = $("dead-letters").tBodies[0];
  body.replaceChildren();
  for (const r of d.last) {
    body.append(el("tr", { "data-letter": r.id, "data-of": r.component, title: r.origin },
      el("td", { class: "action" }, r.id),
      el("td", {}, r.component),
      el("td", { class: "num" }, r.task),
      el("td", { class: "cause", title: r.values }, r.values),
      el("td", { class: "cause", title: r.error }, r.error),
      el("td", { class: "num" }, r.attempts)));
  }
  $("no-dead-letters").hidden = d.last.length > 0;
  const replaying = d.replaying ? ` · ${fmtInt(d.replaying)} replaying` : "";
  setText("dead-held", `${fmtInt(d.held)} held · policy ${d.policy || "–"}${replaying}`);
}

// Whether each error's traceback is open, as the reader left it; the newest starts open.
const tracebackOpen = new Map();

function renderErrors(errors) {
  const root = $("errors");
  root.replaceChildren();
  errors.slice(0, 10).forEach((e, i) => {
    const where = [
      e.kind,
      e.component && `component ${e.component}`,
      e.task !== null && e.task !== undefined && `task ${e.task}`,
      e.txid !== null && e.txid !== undefined && `txid ${e.txid}`,
    ].filter(Boolean).join(" · ");
    const item = el("div", { class: "error", "data-kind": e.kind },
      el("div", { class: "where" }, `${fmtClock(e.at)} · ${where}`),
      el("div", { class: "text" }, e.text));
    if (e.traceback) {
      const key = `${e.at}|${e.text}`;
      if (!tracebackOpen.has(key)) tracebackOpen.set(key, i === 0);
      const details = el("details", { open: tracebackOpen.get(key) },
        el("summary", {}, "traceback"), el("pre", { class: "traceback" }, e.traceback));
      details.addEventListener("toggle", () => tracebackOpen.set(key, details.open));
      item.append(details);
    }
    root.append(item);
  });
  $("no-errors").hidden = errors.length > 0;
}

// ---------------------------------------------------------------- polling
async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

async function refresh() {
  try {
    if (graph === null) {
      graph = await getJson("api/topology");
      drawTopology();
      drawn.delete("components"); // the boxes' figures are drawn with the table
    }
    render(await getJson("api/snapshot"));
    $("offline").hidden = true;
  } catch (err) {
    $("offline").hidden = false;
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
