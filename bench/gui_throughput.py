"""Synthetic GUI envs vs real MiniWoB++ in headless Chromium: env steps per wall-clock second.

Like with like: the same four tasks (click-button, click-checkboxes, enter-text, login-user), the
same ``Dict`` observation (screenshot + instruction/accessibility tree), the same text actions,
one env in this process. The synthetic envs (``omnigym/GUI-*-v0``, zero latency) run at 160x210
(MiniWoB's size) and 512x512, each with random valid clicks and with the ``gui_oracle`` policy
(whose episodes type, press keys and submit); the real tasks run through
``omnigym.envs.gui.miniwob`` with random valid clicks (MiniWoB's episodes run in real time and
end on a wrong click or the page's clock). Only ``reset`` and ``step`` are timed, and resets count
as steps; the policy's time is excluded. Browser start-up (``gym.make``) is reported separately.

Last line: one JSON object; ``ratio`` = synthetic steps/s at 160x210 (random clicks) / real
browser steps/s (random clicks), ``ratio_oracle`` the same with the oracle on the synthetic side,
``ratio_512`` at 512x512. Without Chromium or miniwob the real side is skipped and the ratios are
null (the reason is printed).

``--families`` also times every synthetic family with the ``gui_oracle`` policy for a fixed number
of seeded episodes (200; 20 with ``--quick``) at 160x210 and 512x512 (image + text) and text only
(``obs_keys: [text]``, which paints nothing): the per-family table of docs/envs/gui.md.

Usage: ``omnigym bench gui_throughput [--quick] [--families]``
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

DURATIONS = {"quick": "about 40 s", "full": "not recorded"}
"""On a 2-core CPU, glyph cache built: docs/envs/gui.md, "Benchmark: synthetic vs real browser"."""

FAMILIES = {
    "ClickButton": "click-button",
    "ClickCheckboxes": "click-checkboxes",
    "EnterText": "enter-text",
    "LoginUser": "login-user",
}
"""Synthetic family -> the MiniWoB++ task it imitates."""


def random_clicks(width: int, height: int, seed: int = 0) -> Callable[[dict[str, Any]], str]:
    """A policy of uniformly random clicks on the screen (always valid actions)."""
    rng = np.random.default_rng(seed)
    return lambda obs: f"click({rng.integers(width)}, {rng.integers(height)})"


def oracle() -> Callable[[dict[str, Any]], str]:
    """The ``gui_oracle`` policy's rule: reads the ``text`` observation, solves the task."""
    from omnigym.envs.gui.oracle import solve

    return lambda obs: solve(obs["text"])


def run_episodes(env: Any, policy: Callable[[dict[str, Any]], str], seconds: float) -> dict[str, float]:
    """Step ``env`` for about ``seconds`` of timed env calls; resets count as steps."""
    steps, episodes, successes, wall, seed = 0, 0, 0, 0.0, 0
    start = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    wall += time.perf_counter() - start
    while wall < seconds:
        action = policy(obs)
        start = time.perf_counter()
        obs, _, terminated, truncated, info = env.step(action)
        wall += time.perf_counter() - start
        steps += 1
        if terminated or truncated:
            episodes += 1
            successes += int(info["is_success"])
            seed += 1
            start = time.perf_counter()
            obs, _ = env.reset(seed=seed)
            wall += time.perf_counter() - start
            steps += 1
    return {"steps_per_s": steps / wall, "episodes": episodes, "success_rate": successes / max(episodes, 1)}


def measure_synthetic(size: tuple[int, int], policy_name: str, seconds: float) -> dict[str, float]:
    """Mean steps/s of the four synthetic families at ``size`` (width, height)."""
    import gymnasium as gym

    import omnigym.envs

    omnigym.envs.register_envs()
    rates, success = [], []
    for family in FAMILIES:
        env = gym.make(f"omnigym/GUI-{family}-v0", width=size[0], height=size[1])
        policy = oracle() if policy_name == "oracle" else random_clicks(*size)
        figures = run_episodes(env, policy, seconds / len(FAMILIES))
        env.close()
        rates.append(figures["steps_per_s"])
        success.append(figures["success_rate"])
    return {"steps_per_s": float(np.mean(rates)), "success_rate": float(np.mean(success))}


def episodes_per_family(episodes: int) -> dict[str, dict[str, float]]:
    """Oracle steps/s of every synthetic family over ``episodes`` seeded episodes, per observation setting."""
    import gymnasium as gym

    import omnigym.envs

    omnigym.envs.register_envs()
    settings = {"160x210": {"width": 160, "height": 210}, "512x512": {"width": 512, "height": 512}}
    settings["text_only"] = {"obs_keys": ["text"]}
    families = sorted(k.split("GUI-")[1][:-3] for k in gym.registry if k.startswith("omnigym/GUI-"))
    rows: dict[str, dict[str, float]] = {}
    for family in families:
        rows[family] = {}
        for setting, kwargs in settings.items():
            env = gym.make(f"omnigym/GUI-{family}-v0", **kwargs)
            policy = oracle()
            steps, successes, wall = 0, 0, 0.0
            for seed in range(episodes):
                start = time.perf_counter()
                obs, _ = env.reset(seed=seed)
                wall += time.perf_counter() - start
                steps, done = steps + 1, False
                while not done:
                    action = policy(obs)
                    start = time.perf_counter()
                    obs, _, terminated, truncated, info = env.step(action)
                    wall += time.perf_counter() - start
                    steps, done = steps + 1, terminated or truncated
                successes += int(info["is_success"])
            env.close()
            rows[family][f"{setting}_steps_per_s"] = steps / wall
            rows[family][f"{setting}_success_rate"] = successes / episodes
        rates = (f"{s} {rows[family][f'{s}_steps_per_s']:,.0f} steps/s" for s in settings)
        print(f"{family}: " + ", ".join(rates))
    return rows


def measure_real(seconds: float) -> dict[str, float]:
    """Mean steps/s of the four MiniWoB++ tasks (random clicks), and the browser start-up time."""
    from omnigym.envs.gui.miniwob import make_miniwob_env

    rates, startups = [], []
    for task in FAMILIES.values():
        start = time.perf_counter()
        env = make_miniwob_env(task)
        startups.append(time.perf_counter() - start)
        figures = run_episodes(env, random_clicks(env.width, env.height), seconds / len(FAMILIES))
        env.close()
        rates.append(figures["steps_per_s"])
    return {"steps_per_s": float(np.mean(rates)), "startup_s": float(np.mean(startups))}


def main() -> None:
    """Measure both and print the figures (the last line is JSON)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short timings (about a minute in all)")
    parser.add_argument(
        "--families", action="store_true", help="also every family with the oracle (200 episodes; quick: 20)"
    )
    args = parser.parse_args()
    from omnigym.platform.runtime import apply_thread_policy

    threads = apply_thread_policy()  # $OMNIGYM_THREADS, else 1 (the oracle's time is not measured)
    seconds = 4.0 if args.quick else 20.0
    synthetic = {
        f"{policy}_{w}x{h}": measure_synthetic((w, h), policy, seconds)
        for w, h in ((160, 210), (512, 512))
        for policy in ("random", "oracle")
    }
    for key, figures in synthetic.items():
        print(f"synthetic {key}: {figures['steps_per_s']:.0f} steps/s, success {figures['success_rate']:.2f}")
    from omnigym.envs.gui.miniwob import browser_unavailable_reason

    reason = browser_unavailable_reason()
    real: dict[str, float] | None = None
    if reason is None:
        real = measure_real(3 * seconds)
        print(
            f"MiniWoB++ (headless Chromium, random clicks): {real['steps_per_s']:.1f} steps/s, "
            f"browser start {real['startup_s']:.2f} s"
        )
    else:
        print(f"MiniWoB++ skipped: {reason}")

    def ratio(key: str) -> float | None:
        return synthetic[key]["steps_per_s"] / real["steps_per_s"] if real else None

    figures: dict[str, Any] = {
        "bench": "gui_throughput",
        "ratio": ratio("random_160x210"),
        "ratio_oracle": ratio("oracle_160x210"),
        "ratio_512": ratio("random_512x512"),
        **{f"synthetic_{key}_steps_per_s": run["steps_per_s"] for key, run in synthetic.items()},
        "synthetic_oracle_success_rate": synthetic["oracle_160x210"]["success_rate"],
        "miniwob_steps_per_s": real["steps_per_s"] if real else None,
        "miniwob_startup_s": real["startup_s"] if real else None,
        "miniwob_skipped": reason,
        "torch_threads": threads,
        "quick": args.quick,
    }
    if args.families:
        figures["families"] = episodes_per_family(20 if args.quick else 200)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
