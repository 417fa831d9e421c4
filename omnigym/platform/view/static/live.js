// omnigym view: live sessions. The server makes the env (and a policy) and steps it on request;
// with no policy a person acts: typed text for text-action envs, keys or buttons for Discrete,
// numbers or JSON for Box. Errors (bad env id, a policy that does not fit, a malformed action)
// come back as one line and show in the error bar.
"use strict";

const LIVE_EXAMPLES = ["omnigym/GUI-ClickButton-v0", "omnigym/Driving-v0", "CartPole-v1"];

async function pageLiveForm(app) {
  const info = await getInfo();
  if (!info.live) {
    app.replaceChildren(el("h2", {}, "Live"), el("p", { id: "live-off" },
      "Live sessions are off: start the viewer with `omnigym view --live` to run a policy or play an env here."));
    return;
  }
  const envIds = [...new Set([...info.recordings.map((r) => r.env_id), ...LIVE_EXAMPLES])];
  const env = el("input", { id: "live-env", list: "live-envs", value: sessionStorage.getItem("live.env") || envIds[0], size: 36 });
  const policy = el("input", { id: "live-policy", value: sessionStorage.getItem("live.policy") || "", size: 36,
    placeholder: "empty: you play; or random, gui_oracle, pdm_closed, runs/…" });
  const kwargs = el("input", { id: "live-kwargs", value: sessionStorage.getItem("live.kwargs") || "{}", size: 36 });
  const seed = el("input", { id: "live-seed", type: "number", value: 0, style: "width:6em" });
  const start = el("button", { id: "live-start", type: "submit" }, "start");
  const form = el("form", { class: "live-form" },
    el("label", {}, "env id ", env), el("datalist", { id: "live-envs" }, envIds.map((id) => el("option", { value: id }))),
    el("label", {}, "policy ", policy), el("label", {}, "env kwargs (JSON) ", kwargs), el("label", {}, "seed ", seed), start);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showError("");
    let envKwargs;
    try {
      envKwargs = JSON.parse(kwargs.value || "{}");
    } catch (error) {
      return showError(`env kwargs is not valid JSON: ${error.message}`);
    }
    ["env", "policy", "kwargs"].forEach((k, i) => sessionStorage.setItem(`live.${k}`, [env, policy, kwargs][i].value));
    start.disabled = true;
    start.textContent = "starting… (making the env and policy)";
    try {
      const view = await post("/api/live", { env_id: env.value.trim(), policy: policy.value.trim() || null,
        env_kwargs: envKwargs, seed: Number(seed.value) || 0 });
      location.hash = `#/live/${view.id}`;
    } catch (error) {
      showError(error.message);
    } finally {
      start.disabled = false;
      start.textContent = "start";
    }
  });
  app.replaceChildren(el("h2", {}, "Live"),
    el("p", { class: "muted" }, "Make an env in the server and step it: with a policy (play/pause/step), or with none and act yourself."),
    form);
}

/** The input a person acts with, for the env's action space; act(action) sends one step. */
function actionInput(spec, act) {
  if (spec.kind === "text") {
    const input = el("input", { id: "action-text", size: 60, maxlength: spec.max_length, placeholder: "type an action, e.g. click(80, 120), then Enter" });
    const send = () => act(input.value);
    input.addEventListener("keydown", (event) => event.key === "Enter" && send());
    return { node: el("div", { class: "action-input" }, input, el("button", { id: "send", onclick: send }, "send")), keys: null };
  }
  if (spec.kind === "discrete") {
    const label = (i) => spec.names[i - spec.start] || String(i);
    const actions = Array.from({ length: spec.n }, (_, k) => k + spec.start);
    const buttons = actions.map((a) => el("button", { class: "discrete", "data-action": a, onclick: () => act(a) }, `${a}: ${label(a)}`));
    const named = (word, fallback) => {
      const index = spec.names.findIndex((n) => n.toUpperCase() === word);
      return index >= 0 ? index + spec.start : fallback < spec.n ? fallback + spec.start : null;
    };
    const arrows = { ArrowLeft: named("LEFT", 0), ArrowRight: named("RIGHT", 1), ArrowUp: named("UP", 2), ArrowDown: named("DOWN", 3) };
    const keys = (event) => {
      const digit = /^[0-9]$/.test(event.key) ? Number(event.key) : null;
      const action = digit !== null ? (digit < spec.start + spec.n && digit >= spec.start ? digit : null) : arrows[event.key];
      if (action === null || action === undefined) return false;
      act(action);
      return true;
    };
    const hint = Object.entries(arrows).filter(([, a]) => a !== null).map(([k, a]) => `${k.replace("Arrow", "")}=${a}`).join(" ");
    return { node: el("div", { class: "action-input" }, buttons, el("span", { class: "muted" }, ` keys: digits, arrows (${hint})`)), keys };
  }
  if (spec.kind === "box" && spec.low.length <= 12) {
    const boxes = spec.low.map((low, i) => el("input", { type: "number", step: "any", class: "box-dim", "data-dim": i,
      min: low ?? undefined, max: spec.high[i] ?? undefined, value: Math.min(Math.max(0, low ?? 0), spec.high[i] ?? 0),
      title: `[${fmt(low)}, ${fmt(spec.high[i])}]`, style: "width:6em" }));
    const send = () => act(spec.shape.length > 1 ? JSON.stringify(boxes.map((b) => Number(b.value))) : boxes.map((b) => (b.value === "" ? NaN : Number(b.value))));
    boxes.forEach((b) => b.addEventListener("keydown", (event) => event.key === "Enter" && send()));
    return { node: el("div", { class: "action-input" }, `action [${spec.shape.join("×")}] `, boxes, el("button", { id: "send", onclick: send }, "send")), keys: null };
  }
  const input = el("input", { id: "action-json", size: 60, placeholder: `JSON action for ${spec.space || `shape [${spec.shape}]`}` });
  const send = () => act(input.value);
  input.addEventListener("keydown", (event) => event.key === "Enter" && send());
  return { node: el("div", { class: "action-input" }, input, el("button", { id: "send", onclick: send }, "send")), keys: null };
}

async function pageLive(app, sid) {
  let view = await api(`/api/live/${sid}`);
  const panel = el("div", { class: "step", id: "panel-0" });
  const chart = el("div", { class: "chart" });
  const status = el("span", { id: "live-status", class: "muted" });
  let rewards = [], timer = null, busy = false;
  const show = (next) => {
    view = next;
    if (view.step === 0) rewards = [];
    else rewards[view.step - 1] = view.reward;
    renderStep(panel, view, view.done ? "episode over" : null);
    status.textContent = `seed ${view.seed} · step ${view.step} · return ${fmt(view.return_so_far)}${view.done ? " · episode over: reset for another" : ""}`;
    chart.replaceChildren(plotSVG({ series: [{ name: "reward", points: rewards.map((r, i) => [i, r]) }], height: 110, xlabel: "step" }));
    if (view.done) stop();
  };
  const request = async (path, body) => {
    if (busy) return;
    busy = true;
    try {
      showError("");
      show(await post(`/api/live/${sid}/${path}`, body));
    } catch (error) {
      showError(error.message);
      stop();
    } finally {
      busy = false;
    }
  };
  const play = el("button", { id: "live-play" }, "▶ play");
  const stop = () => {
    clearInterval(timer);
    timer = null;
    play.textContent = "▶ play";
  };
  play.addEventListener("click", () => {
    if (timer) return stop();
    play.textContent = "❚❚ pause";
    timer = setInterval(() => request("step", {}), 1000 / Number(speed.value));
  });
  const speed = el("select", { id: "live-speed" }, [1, 2, 5, 10, 20].map((n) => el("option", { value: n, selected: n === 5 }, `${n}/s`)));
  const seed = el("input", { type: "number", id: "live-reset-seed", placeholder: "next seed", style: "width:7em" });
  const reset = el("button", { id: "live-reset", onclick: () => request("reset", { seed: seed.value === "" ? null : Number(seed.value) }) }, "reset");
  const close = el("button", { id: "live-close", onclick: async () => {
    stop();
    await api(`/api/live/${sid}`, { method: "DELETE" }).catch(() => null);
    location.hash = "#/live";
  } }, "close");
  const controls = el("div", { class: "controls" });
  let keys = null;
  if (view.policy) {
    controls.append(el("button", { id: "live-step", onclick: () => request("step", {}) }, "step"), play, speed);
  } else {
    const input = actionInput(view.action_space, (action) => request("step", { action }));
    controls.append(input.node);
    keys = input.keys;
  }
  controls.append(seed, reset, close, status);
  const keydown = (event) => {
    if (["INPUT", "TEXTAREA", "SELECT"].includes(event.target.tagName)) return;
    if (keys && keys(event)) event.preventDefault();
    else if (view.policy && event.key === " ") (play.click(), event.preventDefault());
    else if (view.policy && event.key === "ArrowRight") (request("step", {}), event.preventDefault());
  };
  document.addEventListener("keydown", keydown);
  onCleanup(() => (stop(), document.removeEventListener("keydown", keydown)));
  app.replaceChildren(el("h2", {}, `Live · ${view.env_id}`),
    el("p", { class: "muted" }, view.policy ? `policy ${view.policy} acts (step, or play/pause; keys → and space)` : "you act: no policy", ` · session ${sid}`),
    controls, panel, chart);
  show(view);
}

VIEW.routes.push([/^#\/live\/?$/, pageLiveForm], [/^#\/live\/([\w-]+)$/, pageLive]);
