"""The ``async`` and ``ray`` runtimes vs the synchronous ``local`` one on a GUI env with per-step latency.

The env: ``omnigym/GUI-ClickButton-v0`` (click the instructed button among 2-6 scattered ones; a
wrong click fails, 5 steps) with a simulated UI latency per step (``latency``, uniform 15-25 ms).
An MLP acts through a thin adapter (:class:`ClickSlots`): the observation is the env's own ``text``
observation (instruction + accessibility tree) read into a vector (per button slot: present,
position, width, whether its label is the instructed one) and the action picks a slot to click
(``click(x, y)`` at its centre). No pixels: the comparison is about the runtimes.

Fairness (issue 12): both runtimes train the same policy with the same algorithm (decoupled PPO;
on fresh data it is PPO) and the same update work per sample (the same ``[T, N]`` batch, epochs and
minibatches), on the same number of envs ``N = 8``, stepped concurrently:

* ``local``: one vector env of ``N`` envs whose steps run on ``N`` threads (:class:`ThreadVectorEnv`,
  what a careful user does for envs that wait), so the latencies overlap; the loop collects ``T``
  steps, then updates.
* ``async``: 2 env workers, each with a :class:`ThreadVectorEnv` of ``N / 2`` envs, collecting while
  the learner updates (``runtime.max_staleness`` 1).
* ``ray`` (when Ray is installed; ``--runtimes`` chooses): the same 2 workers as Ray actors on a
  local 2-CPU Ray started once before the runs (as a user's cluster would be); each actor reserves
  ``2 / num_workers`` CPUs. Its samples/s include starting the actors (a process each, 1-3 s);
  ``steady`` figures leave out the first iteration of every runtime.

Only the overlap of acting and learning differs, plus one thing that comes with decoupling: a
worker's vector step waits for the slowest of its 4 latencies, not of all 8. The full run also has a
fixed latency (no such gain) and 8 workers of 1 env.

Reported: trained samples per second of each runtime over the whole run (``ratio`` = async /
local, ``ray_ratio`` = ray / local), learning curves (training episode return vs samples) and a
final deterministic evaluation (100 episodes, no latency), the learner's share of the local loop
(``learn/env`` = update time / collect time: what overlap can hide), and the async metrics (env and
learner utilisation, staleness, weight-sync bytes). The sweep changes ``num_epochs`` (the
learner's time per sample). The ideal ratio is ``(E + L) / max(E, L)`` (2 when the learner's
time ``L`` equals the env's ``E``); on a shared machine the overlapped parts slow each other, which
the utilisations show.

Last line: one JSON object; ``ratio`` is the balanced setting's (learner time about env time).

Usage: ``omnigym bench async_vs_sync [--quick]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

DURATIONS = {"quick": "3.5 min", "full": "10 min"}
"""Measured on 2 shared CPU cores: docs/runtime.md, "Benchmark: omnigym bench async_vs_sync"."""

ENV_ID = "omnigym_bench/GUIClickSlots-v0"
SLOTS = 6
"""ClickButton shows 2-6 buttons."""
BUTTON = re.compile(r'^\[\d+\] button "(?P<label>[^"]*)" \((?P<x>\d+), (?P<y>\d+), (?P<w>\d+), (?P<h>\d+)\)$')
TARGET = re.compile(r'Click the button "(?P<label>[^"]*)"')


class ClickSlots(gym.Wrapper):
    """ClickButton as a vector observation and ``Discrete(6)`` slot actions (see the module docstring).

    Observation ``state`` [6 * 5]: per slot ``present, x / W, y / H, w / W, is_target``, slots in
    the accessibility tree's order. Action ``i``: click the centre of slot ``i`` (a missing slot's
    click lands on the empty window: no effect, reward 0).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.width, self.height = env.unwrapped.config.width, env.unwrapped.config.height
        self.observation_space = spaces.Dict({"state": spaces.Box(-1.0, 2.0, (SLOTS * 5,), np.float32)})
        self.action_space = spaces.Discrete(SLOTS)
        self._centres: list[tuple[int, int]] = []

    def reset(self, **kwargs: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the GUI env and read its text."""
        obs, info = self.env.reset(**kwargs)
        return self._read(obs["text"]), info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Click the slot's centre."""
        slot = int(action)
        x, y = self._centres[slot] if slot < len(self._centres) else (1, 1)
        obs, reward, terminated, truncated, info = self.env.step(f"click({x}, {y})")
        return self._read(obs["text"]), float(reward), terminated, truncated, info

    def _read(self, text: str) -> dict[str, np.ndarray]:
        target = TARGET.search(text)
        buttons = [m for m in (BUTTON.match(line.strip()) for line in text.splitlines()) if m]
        state = np.zeros((SLOTS, 5), np.float32)
        self._centres = []
        for i, b in enumerate(buttons[:SLOTS]):
            x, y, w, h = (int(b[k]) for k in "xywh")
            self._centres.append((x + w // 2, y + h // 2))
            is_target = float(target is not None and b["label"] == target["label"])
            state[i] = (1.0, x / self.width, y / self.height, w / self.width, is_target)
        return {"state": state.reshape(-1)}


def make_click_slots(**kwargs: Any) -> gym.Env:
    """The adapted ClickButton env; ``kwargs`` go to the GUI env (``latency``, ...)."""
    import omnigym.envs  # noqa: F401  (registers the GUI ids)

    return ClickSlots(gym.make("omnigym/GUI-ClickButton-v0", obs_keys=["text"], **kwargs))


class ThreadVectorEnv(gym.vector.VectorEnv):
    """``N`` envs stepped on ``N`` threads (same-step autoreset).

    The latencies overlap, as in an ``AsyncVectorEnv``, without processes: for envs whose steps
    wait (sleep, I/O) and so release the GIL.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}  # noqa: RUF012

    def __init__(self, envs: list[gym.Env]) -> None:
        self.envs = envs
        self.num_envs = len(envs)
        self.single_observation_space = envs[0].observation_space
        self.single_action_space = envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._pool = ThreadPoolExecutor(self.num_envs, thread_name_prefix="bench-vec-env")

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env (sub-env ``i`` with ``seed + i``)."""
        seeds = (
            seed
            if isinstance(seed, list)
            else [None if seed is None else seed + i for i in range(self.num_envs)]
        )
        results = list(self._pool.map(lambda e, s: e.reset(seed=s), self.envs, seeds))
        infos: dict[str, Any] = {}
        for i, (_, info) in enumerate(results):
            infos = self._add_info(infos, info, i)
        return self._batch([obs for obs, _ in results]), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env on its thread; finished ones reset in the same step."""
        results = list(self._pool.map(self._step_one, self.envs, list(actions)))
        infos: dict[str, Any] = {}
        for i, (_, _, _, _, info, final) in enumerate(results):
            if final is not None:
                infos = self._add_info(infos, {"final_obs": final[0], "final_info": final[1]}, i)
            infos = self._add_info(infos, info, i)
        return (
            self._batch([r[0] for r in results]),
            np.array([r[1] for r in results], np.float64),
            np.array([r[2] for r in results], bool),
            np.array([r[3] for r in results], bool),
            infos,
        )

    @staticmethod
    def _step_one(env: gym.Env, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any], Any]:
        obs, reward, terminated, truncated, info = env.step(action)
        final = None
        if terminated or truncated:
            final = (obs, info)
            obs, info = env.reset()
        return obs, reward, terminated, truncated, info, final

    def _batch(self, observations: list[Any]) -> Any:
        out = create_empty_array(self.single_observation_space, self.num_envs)
        return concatenate(self.single_observation_space, observations, out)

    def close_extras(self, **kwargs: Any) -> None:
        """Close the envs and the threads."""
        for env in self.envs:
            env.close()
        self._pool.shutdown()


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make_click_slots)


def experiment(runtime: str, setting: dict[str, Any], steps: int, seed: int, run_dir: Path) -> Any:
    """The experiment config both runtimes share (only ``runtime`` differs)."""
    import torch

    from omnigym.platform.experiment import build_experiment

    num_envs = setting["num_envs"]
    return build_experiment(
        {
            "name": f"async_vs_sync_{runtime}",
            "seed": seed,
            "total_steps": steps,
            "run_dir": str(run_dir),
            "env": {"id": ENV_ID, "num_envs": num_envs, "kwargs": {"latency": list(setting["latency"])}},
            "policy": {"type": "mlp", "hidden_sizes": setting["hidden_sizes"]},
            "algo": {
                "type": "decoupled_ppo",
                "num_steps": setting["num_steps"],
                "num_epochs": setting["num_epochs"],
                "num_minibatches": 4,
                "learning_rate": setting["learning_rate"],
                "anneal_lr": False,
                "gamma": 0.9,
                "gae_lambda": 0.95,
                "ent_coef": 0.01,
                "weight_cap": setting.get("weight_cap"),
            },
            "runtime": {
                "type": runtime,
                "num_workers": setting["num_workers"],
                "max_staleness": 1,
                "torch_threads": torch.get_num_threads(),  # what main applied (apply_thread_policy)
                "ray": {"cpus_per_worker": min(1.0, 2 / setting["num_workers"])},
            },
            "eval": {"every_steps": 0, "episodes": 100, "seed": 10_000},
            "log": {"progress": False, "tensorboard": False},
            "checkpoint": {"every_steps": 0},
        }
    )


def train(runtime: str, setting: dict[str, Any], steps: int, seed: int, run_dir: Path) -> dict[str, Any]:
    """Train one runtime; returns samples/s, timings, the learning curve and the evaluation."""
    import torch

    from omnigym.platform.collect import make_collector
    from omnigym.platform.evaluate import evaluate_policy
    from omnigym.platform.runtime.async_runtime import AsyncRuntime
    from omnigym.platform.runtime.ray_runtime import RayRuntime
    from omnigym.platform.trainers.on_policy import OnPolicyTrainer

    config = experiment(runtime, setting, steps, seed, run_dir)
    trainer = OnPolicyTrainer(config, run_dir)

    def thread_envs(env_config: Any) -> ThreadVectorEnv:
        return ThreadVectorEnv(
            [make_click_slots(latency=setting["latency"]) for _ in range(env_config.num_envs)]
        )

    if runtime == "async" and setting["num_workers"] < config.env.num_envs:  # several envs per worker
        trainer.runtime = AsyncRuntime(config, trainer.policy, make_envs=thread_envs)
    if runtime == "ray":  # the actors build the envs themselves (this module travels by value)
        trainer.runtime = RayRuntime(config, trainer.policy, make_envs=thread_envs)
    if runtime == "local":  # the careful user's vector env: the N latencies overlap
        trainer.envs.close()
        trainer.envs = ThreadVectorEnv(
            [make_click_slots(latency=setting["latency"]) for _ in range(config.env.num_envs)]
        )
        trainer.collector = make_collector(
            trainer.envs, trainer.policy, config.algo.num_steps, trainer.device
        )
        trainer.collector.reset(seed=config.seed)
    curve: list[tuple[int, float]] = []
    lines: list[dict[str, float]] = []
    start = time.perf_counter()
    first_end, first_samples = start, 0
    try:
        while trainer.iteration < trainer.num_iterations:
            metrics = trainer.train_iteration()
            if trainer.iteration == 1:
                first_end, first_samples = time.perf_counter(), trainer.global_step
            lines.append(metrics)
            if "rollout/episode_return" in metrics:
                curve.append((trainer.global_step, metrics["rollout/episode_return"]))
    finally:
        trainer.close()
    seconds = time.perf_counter() - start
    policy = trainer.policy.eval()
    result = evaluate_policy(policy, ENV_ID, episodes=100, seed=10_000, deterministic=True, num_envs=10)
    collect_s = sum(m["time/collect_s"] for m in lines)
    update_s = sum(m["time/update_s"] for m in lines)
    out: dict[str, Any] = {
        "samples": trainer.global_step,
        "seconds": seconds,
        "sps": trainer.global_step / seconds,
        "sps_steady": (trainer.global_step - first_samples) / max(start + seconds - first_end, 1e-9),
        "collect_s": collect_s,
        "update_s": update_s,
        "curve": curve,
        "eval_return": result.summary()["return_mean"],
        "torch_threads": torch.get_num_threads(),
    }
    if runtime in ("async", "ray"):
        tail = lines[len(lines) // 4 :] or lines  # past the start-up
        for key in ("runtime/env_util", "runtime/learner_util", "runtime/staleness_mean", "sync/publish_s"):
            out[key] = float(np.mean([m[key] for m in tail]))
        last = lines[-1]
        out["sync_bytes"] = last["sync/bytes"]
        out["sync_dense_bytes"] = last["sync/dense_bytes"]
        out["staleness_hist"] = {k: v for k, v in last.items() if k.startswith("data/staleness_")}
        out["dropped_stale"] = last["data/dropped_stale"]
        out["env_steps_total"] = last["runtime/env_steps_total"]
    return out


def binned(curve: list[tuple[int, float]], total: int, bins: int) -> list[float | None]:
    """Mean training return per ``total / bins`` samples (None where no episode ended)."""
    edges = np.linspace(0, total, bins + 1)
    out: list[float | None] = []
    for low, high in itertools.pairwise(edges):
        values = [r for s, r in curve if low < s <= high]
        out.append(round(float(np.mean(values)), 3) if values else None)
    return out


JITTER = (0.015, 0.025)
BASE = {
    "num_envs": 8,
    "num_steps": 32,
    "num_workers": 2,
    "hidden_sizes": [2048, 2048],
    "learning_rate": 3e-4,
    "latency": JITTER,
}
SETTINGS: dict[str, dict[str, Any]] = {
    "env-bound": {**BASE, "num_epochs": 1},
    "balanced": {**BASE, "num_epochs": 6},
    "learner-bound": {**BASE, "num_epochs": 16},
    "balanced, fixed 20 ms": {**BASE, "num_epochs": 6, "latency": (0.02, 0.02)},
    "balanced, 8 workers x 1 env": {**BASE, "num_epochs": 6, "num_workers": 8},
}
"""Settings of the sweep: ``num_epochs`` moves the learner's time per sample (about 0.15, 0.8 and
2 times the env's in the local loop, on an idle core); the last two change the latency's jitter and
the split of the envs between workers (2 workers of 4 envs by default). The MLP is wide (2 x 2048)
so that the learner's time is spent in kernels, as a real learner's is, rather than in Python."""
QUICK = ("env-bound", "balanced", "learner-bound")


def compare(name: str, steps: int, seed: int, root: Path, runtimes: tuple[str, ...]) -> dict[str, Any]:
    """The runtimes on one setting; returns their figures and the ratios to ``local``."""
    setting = SETTINGS[name]
    row: dict[str, Any] = {
        "setting": name,
        "num_epochs": setting["num_epochs"],
        "latency": setting["latency"],
    }
    for runtime in runtimes:
        row[runtime] = train(
            runtime, setting, steps, seed, root / f"{name}-{runtime}-{seed}".replace(" ", "_")
        )
    local = row["local"]
    row["learner_over_env"] = local["update_s"] / local["collect_s"]
    row["ratio"] = row["async"]["sps"] / local["sps"]
    row["ratio_steady"] = row["async"]["sps_steady"] / local["sps_steady"]
    if "ray" in row:
        row["ray_ratio"] = row["ray"]["sps"] / local["sps"]
        row["ray_ratio_steady"] = row["ray"]["sps_steady"] / local["sps_steady"]
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per setting, then the learning curves."""
    header = ("setting", "epochs", "learn/env", "local sps", "async sps", "ratio", "env util", "lrn util")
    print(f"{header[0]:30s}", " ".join(f"{h:>9s}" for h in header[1:]), f"{'stale':>5s} {'eval L/A':>11s}")
    for row in rows:
        a, loc = row["async"], row["local"]
        numbers = (
            row["num_epochs"],
            row["learner_over_env"],
            loc["sps"],
            a["sps"],
            row["ratio"],
            a["runtime/env_util"],
            a["runtime/learner_util"],
        )
        print(
            f"{row['setting']:30s}",
            " ".join(f"{n:9.2f}" for n in numbers),
            f"{a['runtime/staleness_mean']:5.2f} {loc['eval_return']:5.2f}/{a['eval_return']:5.2f}",
        )
        if "ray" in row:
            r = row["ray"]
            print(
                f"{'  ray:':30s} {'':9s} {'':9s} {'':9s} {r['sps']:9.2f} {row['ray_ratio']:9.2f}",
                f"{r['runtime/env_util']:9.2f} {r['runtime/learner_util']:9.2f}",
                f"{r['runtime/staleness_mean']:5.2f} eval {r['eval_return']:5.2f}",
                f"(steady ratio: async {row['ratio_steady']:.2f}, ray {row['ray_ratio_steady']:.2f})",
            )
    for row in rows:
        if "curve_bins" in row:
            bins = len(row["curve_bins"]["local"])
            print(
                f"learning curve ({row['setting']}, seed {row.get('seed', 1)}): mean training return per "
                f"1/{bins} of {row['local']['samples']} samples"
            )
            for runtime in ("local", "async", "ray"):
                if runtime not in row["curve_bins"]:
                    continue
                print(
                    f"  {runtime:6s}",
                    " ".join("  -  " if v is None else f"{v:5.2f}" for v in row["curve_bins"][runtime]),
                )


def default_runtimes() -> tuple[str, ...]:
    """``async``, and ``ray`` where it is installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        print("# ray is not installed: comparing async with local only", file=sys.stderr)
        return ("async",)
    return ("async", "ray")


def start_ray() -> None:
    """A local 2-CPU Ray for every ``ray`` run (this module's env code travels to the actors by value)."""
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")


def ray_figures(row: dict[str, Any]) -> dict[str, Any]:
    """The ``ray`` runtime's figures of a row (empty when it did not run)."""
    if "ray" not in row:
        return {}
    ray_run = row["ray"]
    return {
        "ray_sps": round(ray_run["sps"], 1),
        "ray_ratio": round(row["ray_ratio"], 3),
        "ratio_steady": round(row["ratio_steady"], 3),
        "ray_ratio_steady": round(row["ray_ratio_steady"], 3),
        "ray_env_util": round(ray_run["runtime/env_util"], 3),
        "ray_learner_util": round(ray_run["runtime/learner_util"], 3),
        "ray_staleness_mean": round(ray_run["runtime/staleness_mean"], 3),
        "eval_return_ray": ray_run["eval_return"],
        "curve_ray": row["curve_bins"]["ray"],
    }


def main() -> None:
    """Run the sweep, print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 settings, 4096 samples each (< 5 min)")
    parser.add_argument(
        "--out", type=Path, default=None, help="where the runs go (default: a new temporary directory)"
    )
    parser.add_argument(
        "--runtimes",
        nargs="+",
        choices=("async", "ray"),
        default=None,
        help="compared with local (default: async, and ray when it is installed)",
    )
    args = parser.parse_args()
    # a fresh directory per run unless given: a bench must run again without refusing its last runs
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="omnigym-bench-async-vs-sync-"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
    from omnigym.platform.runtime import apply_thread_policy

    threads = apply_thread_policy()  # $OMNIGYM_THREADS, else 1: learner, env workers and Ray actors
    runtimes = ("local", *(args.runtimes or default_runtimes()))
    if "async" not in runtimes:
        parser.error("--runtimes must include async (its ratio is the headline figure)")
    if "ray" in runtimes:
        start_ray()
    steps = 4096
    names = QUICK if args.quick else tuple(SETTINGS)
    rows = []
    for name in names:
        long_run = name == "balanced"
        seeds = (1,) if args.quick or not long_run else (1, 2)
        for seed in seeds:
            row = compare(name, steps if args.quick or not long_run else 4 * steps, seed, out, runtimes)
            row["seed"] = seed
            row["curve_bins"] = {r: binned(row[r]["curve"], row[r]["samples"], 8) for r in runtimes}
            rows.append(row)
            print(f"# {name} seed {seed}: ratio {row['ratio']:.2f}", file=sys.stderr, flush=True)
    print_table(rows)
    balanced = [row for row in rows if row["setting"] == "balanced"]
    figures = {
        "ratio": float(np.mean([row["ratio"] for row in balanced])),
        "ray_ratio": float(np.mean([row["ray_ratio"] for row in balanced])) if "ray" in runtimes else None,
        "torch_threads": threads,
        "quick": args.quick,
        "settings": [
            {
                "setting": row["setting"],
                "seed": row["seed"],
                "num_epochs": row["num_epochs"],
                "learner_over_env": round(row["learner_over_env"], 3),
                "local_sps": round(row["local"]["sps"], 1),
                "async_sps": round(row["async"]["sps"], 1),
                "ratio": round(row["ratio"], 3),
                "env_util": round(row["async"]["runtime/env_util"], 3),
                "learner_util": round(row["async"]["runtime/learner_util"], 3),
                "staleness_mean": round(row["async"]["runtime/staleness_mean"], 3),
                "staleness_hist": row["async"]["staleness_hist"],
                "dropped_stale": row["async"]["dropped_stale"],
                "sync_bytes": row["async"]["sync_bytes"],
                "sync_dense_bytes": row["async"]["sync_dense_bytes"],
                "sync_publish_s": round(row["async"]["sync/publish_s"], 4),
                "eval_return_local": row["local"]["eval_return"],
                "eval_return_async": row["async"]["eval_return"],
                "curve_local": row["curve_bins"]["local"],
                "curve_async": row["curve_bins"]["async"],
                **ray_figures(row),
            }
            for row in rows
        ],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
