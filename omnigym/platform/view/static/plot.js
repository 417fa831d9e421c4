// omnigym view: a small SVG line chart (no charting library: the page works offline) and the
// curves page, which plots the metrics of runs' metrics.jsonl against the step, runs overlaid.
"use strict";

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const SVG_NS = "http://www.w3.org/2000/svg";
const MAX_POINTS = 2000;

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** About `count` round tick values covering [low, high]. */
function niceTicks(low, high, count = 5) {
  if (!(high > low)) return [low];
  const raw = (high - low) / count, magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  const ticks = [];
  for (let v = Math.ceil(low / step) * step; v <= high + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function tickLabel(value) {
  const abs = Math.abs(value);
  if (abs >= 1e9) return `${Number((value / 1e9).toPrecision(3))}G`;
  if (abs >= 1e6) return `${Number((value / 1e6).toPrecision(3))}M`;
  if (abs >= 1e4) return `${Number((value / 1e3).toPrecision(3))}k`;
  return String(Number(value.toPrecision(4)));
}

/** Every k-th point, so a long curve draws fast (the last point always kept). */
function thin(points) {
  if (points.length <= MAX_POINTS) return points;
  const stride = Math.ceil(points.length / MAX_POINTS);
  const kept = points.filter((_, i) => i % stride === 0);
  if (kept[kept.length - 1] !== points[points.length - 1]) kept.push(points[points.length - 1]);
  return kept;
}

/**
 * A line chart: series [{name, points: [[x, y], ...]}] over shared axes; `marker` draws a vertical
 * line at that x (the current step). Returns a <div> holding the SVG, a legend and a hover readout.
 */
function plotSVG({ series, width = 720, height = 260, marker = null, xlabel = "", title = "" }) {
  const pad = { left: 58, right: 14, top: title ? 24 : 10, bottom: xlabel ? 34 : 22 };
  const all = series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  const box = el("div", { class: "plot" });
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "plot-svg" });
  box.append(chart);
  if (title) chart.append(svg("text", { x: pad.left, y: 16, class: "plot-title" }, title));
  if (!all.length) {
    chart.append(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "muted" }, "no data"));
    return box;
  }
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (x1 === x0) [x0, x1] = [x0 - 1, x1 + 1];
  if (y1 === y0) [y0, y1] = [y0 - Math.max(1, Math.abs(y0) * 0.1), y1 + Math.max(1, Math.abs(y1) * 0.1)];
  const margin = (y1 - y0) * 0.05;
  [y0, y1] = [y0 - margin, y1 + margin];
  const X = (x) => pad.left + ((x - x0) / (x1 - x0)) * (width - pad.left - pad.right);
  const Y = (y) => height - pad.bottom - ((y - y0) / (y1 - y0)) * (height - pad.top - pad.bottom);
  for (const tick of niceTicks(y0, y1)) {
    chart.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: Y(tick), y2: Y(tick), class: "grid" }));
    chart.append(svg("text", { x: pad.left - 6, y: Y(tick) + 4, "text-anchor": "end", class: "tick" }, tickLabel(tick)));
  }
  for (const tick of niceTicks(x0, x1, 6)) {
    chart.append(svg("line", { x1: X(tick), x2: X(tick), y1: pad.top, y2: height - pad.bottom, class: "grid" }));
    chart.append(svg("text", { x: X(tick), y: height - pad.bottom + 14, "text-anchor": "middle", class: "tick" }, tickLabel(tick)));
  }
  if (xlabel) chart.append(svg("text", { x: width - pad.right, y: height - 4, "text-anchor": "end", class: "tick" }, xlabel));
  chart.append(svg("rect", { x: pad.left, y: pad.top, width: width - pad.left - pad.right, height: height - pad.top - pad.bottom, class: "frame" }));
  series.forEach((s, i) => {
    const points = thin(s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y)));
    const color = s.color || PALETTE[i % PALETTE.length];
    const d = points.map(([x, y]) => `${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join(" ");
    chart.append(svg("polyline", { points: d, fill: "none", stroke: color, "stroke-width": 1.6, class: "series", "data-name": s.name }));
    if (points.length === 1) chart.append(svg("circle", { cx: X(points[0][0]), cy: Y(points[0][1]), r: 3, fill: color }));
  });
  if (marker !== null && marker >= x0 && marker <= x1) {
    chart.append(svg("line", { x1: X(marker), x2: X(marker), y1: pad.top, y2: height - pad.bottom, class: "marker" }));
  }
  const readout = el("span", { class: "readout muted" });
  const hover = svg("line", { y1: pad.top, y2: height - pad.bottom, class: "hover", visibility: "hidden" });
  chart.append(hover);
  chart.addEventListener("mousemove", (event) => {
    const rect = chart.getBoundingClientRect();
    const x = x0 + ((event.clientX - rect.left) * (width / rect.width) - pad.left) / (width - pad.left - pad.right) * (x1 - x0);
    const near = series.map((s) => s.points.reduce((best, p) => (!best || Math.abs(p[0] - x) < Math.abs(best[0] - x) ? p : best), null));
    const at = near.find((p) => p);
    if (!at) return;
    hover.setAttribute("x1", X(at[0]));
    hover.setAttribute("x2", X(at[0]));
    hover.setAttribute("visibility", "visible");
    readout.textContent = `${xlabel || "x"} ${fmt(at[0])}: ` + near.map((p, i) => (p ? `${series[i].name} ${fmt(p[1])}` : "")).filter(Boolean).join(", ");
  });
  box.append(el("div", { class: "legend" },
    series.map((s, i) => el("span", {}, el("i", { style: `background:${s.color || PALETTE[i % PALETTE.length]}` }), s.name)), readout));
  return box;
}

// ---- the curves page ---------------------------------------------------------------------------

const DEFAULT_METRICS = ["eval/return_mean", "rollout/episode_return", "train/loss"];

async function pageCurves(app) {
  const runs = await api("/api/runs");
  if (!runs.length) {
    app.replaceChildren(el("h2", {}, "Curves"), el("p", { class: "muted" }, "No runs: start the viewer with `omnigym view --run RUN_DIR` (several overlay)."));
    return;
  }
  const metrics = [...new Set(runs.flatMap((r) => r.metrics))];
  const wanted = new Set(JSON.parse(sessionStorage.getItem("curves.metrics") || "null") ||
    [DEFAULT_METRICS.find((m) => metrics.includes(m)) || metrics[0]].filter(Boolean));
  const shownRuns = new Set(runs.map((r) => r.name));
  const plots = el("div", { id: "plots" });
  const draw = async () => {
    sessionStorage.setItem("curves.metrics", JSON.stringify([...wanted]));
    const chosen = metrics.filter((m) => wanted.has(m));
    if (!chosen.length) return plots.replaceChildren(el("p", { class: "muted" }, "Choose metrics on the left."));
    const query = chosen.map((m) => `metric=${encodeURIComponent(m)}`).join("&");
    const data = await api(`/api/curves?${query}`);
    plots.replaceChildren(...chosen.map((metric) => plotSVG({
      title: metric, xlabel: "step",
      series: data.runs.map((run, i) => ({ name: run.name, color: PALETTE[i % PALETTE.length], points: run.curves[metric] || [] }))
        .filter((s) => shownRuns.has(s.name)),
    })));
  };
  const check = (set, name, id) => el("label", { class: "check" },
    el("input", { type: "checkbox", checked: set.has(name), "data-name": name, id,
      onchange: (event) => { event.target.checked ? set.add(name) : set.delete(name); draw().catch((e) => showError(e.message)); } }), name);
  const filter = el("input", { type: "search", placeholder: "filter metrics", class: "filter" });
  const metricList = el("div", { class: "metric-list" }, metrics.map((m) => check(wanted, m)));
  filter.addEventListener("input", () => metricList.querySelectorAll("label").forEach((label) => {
    label.hidden = !label.textContent.toLowerCase().includes(filter.value.toLowerCase());
  }));
  app.replaceChildren(el("h2", {}, "Curves"), el("div", { class: "curves" },
    el("aside", {},
      el("h4", {}, "runs"), runs.map((r) => el("div", {}, check(shownRuns, r.name),
        el("span", { class: "muted small" }, ` ${r.lines} lines, last step ${fmt(r.last_step)}`))),
      el("h4", {}, "metrics"), filter, metricList,
      el("button", { id: "reload", onclick: () => draw().catch((e) => showError(e.message)) }, "reload")),
    plots));
  await draw();
}

VIEW.routes.push([/^#\/curves\/?$/, pageCurves]);
