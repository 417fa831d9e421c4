// omnigym view: the page's core. Helpers, the hash router, the recordings table, the step view
// shared by replay, side-by-side and live pages, and the replay pages. No build step, no network:
// plot.js draws the charts (SVG) and the curves page, live.js the live page.
"use strict";

const VIEW = { routes: [], info: null, cleanup: [] };

const $ = (selector, root = document) => root.querySelector(selector);

/** A DOM element: el("div", {class: "x", onclick: f}, child, "text", [more]). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** fetch a JSON endpoint; a non-2xx answer throws its one-line {"error"} message. */
async function api(path, options) {
  const response = await fetch(path, options);
  let body;
  try {
    body = await response.json();
  } catch (_) {
    body = { error: `${response.status} ${response.statusText}` };
  }
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function post(path, body, method = "POST") {
  return api(path, { method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {}) });
}

function showError(message) {
  const box = $("#error");
  box.textContent = message ? String(message) : "";
  box.hidden = !message;
}

/** A value as a person reads it: 4 significant digits, true/false, a dash for nothing. */
function fmt(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "number") {
    if (Number.isInteger(value)) return String(value);
    return Math.abs(value) >= 1e5 || (Math.abs(value) < 1e-3 && value !== 0)
      ? value.toExponential(3) : String(Number(value.toPrecision(4)));
  }
  return String(value);
}

function kvTable(object, className) {
  const rows = Object.entries(object || {}).map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, fmt(v))));
  return rows.length ? el("table", { class: `kv ${className || ""}` }, el("tbody", {}, rows)) : null;
}

/** Figures as compact "name value" chips that wrap (episode metrics). */
function chips(object, className) {
  return el("div", { class: `chips ${className || ""}` }, Object.entries(object || {}).map(([k, v]) =>
    el("span", { class: "chip", "data-key": k }, el("span", { class: "muted" }, k), " ", el("b", {}, fmt(v)))));
}

async function getInfo() {
  VIEW.info = VIEW.info || (await api("/api/info"));
  return VIEW.info;
}

function onCleanup(fn) {
  VIEW.cleanup.push(fn);
}

async function route() {
  VIEW.cleanup.splice(0).forEach((fn) => fn());
  showError("");
  const hash = location.hash || "#/";
  const app = $("#app");
  for (const [pattern, page] of VIEW.routes) {
    const match = hash.match(pattern);
    if (!match) continue;
    app.replaceChildren(el("p", { class: "muted" }, "loading…"));
    try {
      await page(app, ...match.slice(1).map(decodeURIComponent));
    } catch (error) {
      app.replaceChildren();
      showError(error.message);
    }
    return;
  }
  showError(`no page ${hash}`);
}

// ---- the step view: one step of a recorded or live episode -----------------------------------

/** Fill `panel` with a step's images, text, action, reward and its parts (images reused by column). */
function renderStep(panel, view, note) {
  const images = panel._images || (panel._images = {});
  const imageRow = el("div", { class: "images" });
  for (const image of view.images) {
    let img = images[image.column];
    if (!img) {
      img = images[image.column] = el("img", { class: "step-image", alt: image.column, "data-column": image.column });
      const scale = image.width && image.width < 320 ? 2 : 1;
      if (image.width) img.style.width = `${image.width * scale}px`;
    }
    if (img.getAttribute("src") !== image.url) img.src = image.url;
    imageRow.append(el("figure", {}, img, el("figcaption", {}, `${image.column} ${image.width}×${image.height}`)));
  }
  const texts = Object.entries(view.texts).map(([key, text]) => [
    el("h4", {}, `observation: ${key}`), el("pre", { class: "step-text", "data-key": key }, text)]);
  const arrays = Object.entries(view.arrays).map(([key, a]) => el("details", { class: "array" },
    el("summary", {}, `${key} [${a.shape.join("×")}]`),
    el("pre", {}, a.values.map(fmt).join(", ") + (a.truncated ? ", …" : ""))));
  const action = view.action;
  const actionText = action === null ? (view.previous_action ? "(none yet: the episode just started)" : "(none: the final observation)")
    : typeof action === "string" ? action
    : action.shape.length ? `[${action.values.map(fmt).join(", ")}]` : fmt(action.values[0]);
  const infos = { ...view.infos };
  const valid = infos.action_valid, error = infos.action_error;
  delete infos.action_valid;
  delete infos.action_error;
  const head = el("div", { class: "step-head" },
    el("span", { class: "step-number" }, `step ${view.step}${view.length !== null ? ` / ${view.length}` : ""}`),
    el("span", {}, view.previous_action ? "last reward " : "reward ", el("b", { class: "step-reward" }, fmt(view.reward))),
    el("span", {}, "return so far ", el("b", { class: "step-return" }, fmt(view.return_so_far))),
    view.terminated ? el("span", { class: "flag" }, "terminated") : null,
    view.truncated ? el("span", { class: "flag" }, "truncated") : null,
    note ? el("span", { class: "flag" }, note) : null);
  const validity = valid === undefined ? null : el("p", { class: `step-valid ${valid ? "ok" : "bad"}` },
    `action_valid: ${valid}`, error ? el("span", { class: "step-action-error" }, ` — ${error}`) : null);
  const components = kvTable(view.reward_components, "step-components");
  panel.replaceChildren(head,
    el("div", { class: "step-body" },
      el("div", { class: "step-left" }, imageRow, arrays.length ? el("div", { class: "arrays" }, arrays) : null),
      el("div", { class: "step-right" }, texts,
        el("h4", {}, view.previous_action ? "last action (it led to this observation)" : "action (the agent's full reply)"),
        el("pre", { class: "step-action" }, actionText),
        validity,
        components ? [el("h4", {}, "reward components"), components] : null,
        Object.keys(infos).length ? [el("h4", {}, "info"), kvTable(infos, "step-infos")] : null)));
}

/** Slider, prev/next/play buttons and arrow keys over steps 0..last; onStep(t) shows step t. */
function makeStepper(container, last, onStep) {
  let t = 0, timer = null, shown = -1;
  const slider = el("input", { id: "slider", type: "range", min: 0, max: last, value: 0, step: 1 });
  const label = el("span", { id: "step-label" }, `0 / ${last}`);
  const play = el("button", { id: "play", title: "play / pause (space)" }, "▶ play");
  const speed = el("select", { id: "speed", title: "steps per second" },
    [1, 2, 5, 10, 20, 50].map((n) => el("option", { value: n, selected: n === 5 }, `${n}/s`)));
  const go = (next) => {
    t = Math.max(0, Math.min(last, next));
    slider.value = t;
    label.textContent = `${t} / ${last}`;
    if (t !== shown) {
      shown = t;
      onStep(t);
    }
  };
  const stop = () => {
    clearInterval(timer);
    timer = null;
    play.textContent = "▶ play";
  };
  const toggle = () => {
    if (timer) return stop();
    if (t >= last) go(0);
    play.textContent = "❚❚ pause";
    timer = setInterval(() => (t >= last ? stop() : go(t + 1)), 1000 / Number(speed.value));
  };
  speed.addEventListener("change", () => timer && (stop(), toggle()));
  slider.addEventListener("input", () => go(Number(slider.value)));
  play.addEventListener("click", toggle);
  const keys = (event) => {
    if (["INPUT", "TEXTAREA", "SELECT"].includes(event.target.tagName) && event.target !== slider) return;
    if (event.key === "ArrowRight") go(t + 1);
    else if (event.key === "ArrowLeft") go(t - 1);
    else if (event.key === "Home") go(0);
    else if (event.key === "End") go(last);
    else if (event.key === " ") toggle();
    else return;
    event.preventDefault();
  };
  document.addEventListener("keydown", keys);
  onCleanup(() => (stop(), document.removeEventListener("keydown", keys)));
  container.append(el("div", { class: "controls" },
    el("button", { id: "first", onclick: () => go(0), title: "first step (Home)" }, "« first"),
    el("button", { id: "prev", onclick: () => go(t - 1), title: "previous step (←)" }, "◀ prev"),
    play,
    el("button", { id: "next", onclick: () => go(t + 1), title: "next step (→)" }, "next ▶"),
    el("button", { id: "last", onclick: () => go(last), title: "last step (End)" }, "last »"),
    slider, label, speed, el("span", { class: "muted" }, "keys: ← → space")));
  go(0);
  return { go, stop };
}

/** Calls fetchStep(t) and render(view), dropping answers that arrive after a newer request. */
function latestOnly(fetchStep, render) {
  let asked = 0;
  return async (t) => {
    const ticket = ++asked;
    try {
      const view = await fetchStep(t);
      if (ticket === asked) render(view);
    } catch (error) {
      showError(error.message);
    }
  };
}

// ---- pages: recordings, one episode, two side by side -----------------------------------------

function episodesTable(rec) {
  const metricNames = [...new Set(rec.episodes.flatMap((e) => Object.keys(e.metrics)))];
  const head = el("tr", {}, ["#", "seed", "agent", "return", "length", ...metricNames].map((h) => el("th", {}, h)));
  const rows = rec.episodes.map((e) => el("tr", { class: "link", onclick: () => (location.hash = `#/episode/${rec.id}/${e.index}`) },
    el("td", {}, el("a", { href: `#/episode/${rec.id}/${e.index}` }, e.index)), el("td", {}, fmt(e.seed)),
    el("td", {}, e.agent), el("td", {}, fmt(e.return)), el("td", {}, e.length),
    metricNames.map((m) => el("td", {}, fmt(e.metrics[m])))));
  return el("div", { class: "scroll" }, el("table", { class: "episodes" }, el("thead", {}, head), el("tbody", {}, rows)));
}

async function pageRecordings(app) {
  const info = await getInfo();
  const parts = [el("h2", {}, "Recordings")];
  if (!info.recordings.length) {
    parts.push(el("p", { class: "muted" }, "No recordings: start the viewer with `omnigym view DIR` or `--minari ID`",
      " (`omnigym eval --record DIR` makes one)."));
  }
  for (const rec of info.recordings) {
    parts.push(el("section", { class: "recording" },
      el("h3", {}, rec.name, " ", el("span", { class: "muted" }, `${rec.env_id} · ${rec.agent || "?"} · ${rec.episodes.length} episodes`)),
      el("p", { class: "muted small" }, `${rec.path} · ${rec.source} · ${rec.created}`),
      episodesTable(rec)));
  }
  app.replaceChildren(...parts);
}

async function pageEpisode(app, rec, ep) {
  const [info, episode] = await Promise.all([getInfo(), api(`/api/recordings/${rec}/episodes/${ep}`)]);
  const name = info.recordings[rec].name;
  const panel = el("div", { class: "step", id: "panel-0" });
  const chart = el("div", { class: "chart" });
  const drawChart = (t) => chart.replaceChildren(plotSVG({
    series: [{ name: "reward", points: episode.rewards.map((r, i) => [i, r]) }], marker: t, height: 120, xlabel: "step" }));
  app.replaceChildren(
    el("h2", {}, `${name} · episode ${episode.index}`),
    el("p", { class: "muted" }, `${episode.env_id} · seed ${fmt(episode.seed)} · agent ${episode.agent} · `,
      `return ${fmt(episode.return)} · ${episode.length} steps`),
    chips(episode.metrics, "episode-metrics"));
  const show = latestOnly((t) => api(`/api/recordings/${rec}/episodes/${ep}/steps/${t}`), (view) => {
    renderStep(panel, view);
    drawChart(view.step);
  });
  makeStepper(app, episode.length, show);
  app.append(panel, chart);
}

async function pageComparePick(app) {
  const info = await getInfo();
  const options = (selected) => info.recordings.map((r) => el("option", { value: r.id, selected: r.id === selected }, `${r.id}: ${r.name} (${r.agent})`));
  const a = el("select", { id: "pick-a" }, options(0)), b = el("select", { id: "pick-b" }, options(Math.min(1, info.recordings.length - 1)));
  const out = el("div");
  const list = async () => {
    const pairs = await api(`/api/pairs?a=${a.value}&b=${b.value}`).catch((e) => showError(e.message));
    if (!pairs) return;
    const recA = info.recordings[a.value], recB = info.recordings[b.value];
    const row = (p) => el("tr", {}, el("td", {}, p.seed),
      el("td", {}, `#${p.a} return ${fmt(recA.episodes[p.a].return)}, ${recA.episodes[p.a].length} steps`),
      el("td", {}, `#${p.b} return ${fmt(recB.episodes[p.b].return)}, ${recB.episodes[p.b].length} steps`),
      el("td", {}, el("a", { href: `#/compare/${a.value}/${p.a}/${b.value}/${p.b}` }, "side by side")));
    out.replaceChildren(pairs.pairs.length
      ? el("table", { class: "episodes" }, el("tr", {}, ["seed", pairs.a, pairs.b, ""].map((h) => el("th", {}, h))), pairs.pairs.map(row))
      : el("p", {}, "No episodes with the same seed."),
    el("p", { class: "muted" }, `unpaired: ${pairs.a} [${pairs.only_a.join(", ")}], ${pairs.b} [${pairs.only_b.join(", ")}]`));
  };
  a.addEventListener("change", list);
  b.addEventListener("change", list);
  app.replaceChildren(el("h2", {}, "Side by side"),
    el("p", { class: "muted" }, "Episodes of two recordings with the same reset seed, stepped by one slider ",
      "(two agents, or a world model against the real env on the same actions)."),
    el("p", {}, "A ", a, " B ", b), out);
  if (info.recordings.length) await list();
}

async function pageCompare(app, recA, epA, recB, epB) {
  const info = await getInfo();
  const sides = [[recA, epA], [recB, epB]];
  const episodes = await Promise.all(sides.map(([r, e]) => api(`/api/recordings/${r}/episodes/${e}`)));
  const last = Math.max(...episodes.map((e) => e.length));
  const panels = sides.map((_, i) => el("div", { class: "step", id: `panel-${i}` }));
  const chart = el("div", { class: "chart" });
  const columns = episodes.map((e, i) => el("div", { class: "side" },
    el("h3", {}, `${info.recordings[sides[i][0]].name} · episode ${e.index}`),
    el("p", { class: "muted" }, `seed ${fmt(e.seed)} · ${e.agent} · return ${fmt(e.return)} · ${e.length} steps`),
    chips(e.metrics, "episode-metrics"), panels[i]));
  app.replaceChildren(el("h2", {}, "Side by side"));
  const fetchBoth = (t) => Promise.all(sides.map(([r, e], i) => api(`/api/recordings/${r}/episodes/${e}/steps/${Math.min(t, episodes[i].length)}`)));
  makeStepper(app, last, latestOnly(fetchBoth, (views) => {
    views.forEach((view, i) => renderStep(panels[i], view, view.step < Number($("#slider").value) ? "episode ended" : null));
    chart.replaceChildren(plotSVG({ marker: Number($("#slider").value), height: 120, xlabel: "step",
      series: episodes.map((e, i) => ({ name: `${info.recordings[sides[i][0]].name} reward`, points: e.rewards.map((r, k) => [k, r]) })) }));
  }));
  app.append(el("div", { class: "sides" }, columns), chart);
}

VIEW.routes.push(
  [/^#\/?$/, pageRecordings],
  [/^#\/episode\/(\d+)\/(\d+)$/, pageEpisode],
  [/^#\/compare\/?$/, pageComparePick],
  [/^#\/compare\/(\d+)\/(\d+)\/(\d+)\/(\d+)$/, pageCompare],
);
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
