"""The ``async`` and ``ray`` runtimes vs the synchronous ``local`` one on three workloads.

Workloads (``bench/_async_workloads.py`` builds their pieces):

* **balanced GUI**: ``omnigym/GUI-ClickButton-v0`` (click the instructed button among 2-6; a wrong
  click fails) with a uniform 15-25 ms UI latency per step, read into a vector by a thin adapter
  (``ClickSlots``) so that an MLP (2 x 2048) acts; learner time about the env time.
* **long-tail GUI**: the same env with log-normal latencies (median 20 ms, sigma 1, clipped at 1 s:
  mostly 20 ms, now and then 100-500), 4 workers of 2 envs (threads, and processes).
* **variable-length VLM**: a tiny random Qwen2 language model (built offline) as the ``vlm``
  policy on the text of ``GUI-ClickButton``, real KV-cached generation, with reply lengths drawn
  log-normally (median 8 tokens, sigma 1, at most 96) through a forced end-of-reply token
  (``ReplyLengths``); 4 process workers of 2 envs. Generation is computation, not waiting: on
  2 cores the workers and the learner share the CPU, so little overlap is possible.

Fairness: every runtime trains the same policy with the same algorithm (decoupled PPO; on fresh
data it is PPO) and the same update work per sample (the same ``[T, N]`` batch, epochs and
minibatches), on the same ``N = 8`` envs stepped concurrently:

* ``local``: one vector env of ``N`` envs whose steps run on ``N`` threads (``ThreadVectorEnv``),
  so the latencies overlap; the VLM generates one batch of ``N`` replies per step. It collects
  ``T`` steps, then updates.
* ``async``: ``K`` env workers of ``N / K`` envs each, collecting while the learner updates
  (``runtime.max_staleness`` 1), as threads or as processes (``runtime.async.workers``).
* ``ray`` (when Ray is installed; ``--runtimes`` chooses): the thread settings' workers as Ray
  actors on a local 2-CPU Ray started once before the runs (as a user's cluster would be); each
  actor reserves ``2 / num_workers`` CPUs. Its samples/s include starting the actors (a process
  each, 1-3 s); ``steady`` figures leave out the first iteration of every runtime.

Besides the overlap of acting and learning, decoupling changes one thing: a worker's batch waits
for the slowest of its ``N / K`` envs (or longest of its replies), not of all ``N``. On long tails
that is most of the gain; the **overlap bound** of each setting counts both: ``(C + U) /
max(C_async, U)`` with ``C``, ``U`` the local loop's collect and update times and ``C_async`` the
collect time less the waiting a batch of ``N / K`` no longer does (from the latency or length
distribution's expected maximum). ``bound_fraction`` = ratio / bound: how much of it the runtime
reached on this machine, where the overlapped parts share 2 cores.

Reported: trained samples per second of each runtime over the whole run (``ratio`` = async /
local, ``ray_ratio`` = ray / local), learning curves and a final deterministic evaluation (GUI:
100 episodes, no latency), the learner's share of the local loop (``learn/env``), the async
metrics (env and learner utilisation, staleness histogram, the importance weights' effective
sample size and the behaviour-vs-learner KL, weight-sync bytes). The full run also sweeps
``num_epochs`` (the learner's time per sample), a fixed latency and 8 workers of 1 env.

Last line: one JSON object; ``ratio`` is the long-tail GUI workload's (target >= 2.0 with 4+
workers on 2 cores), ``workloads`` has each workload's ratio, bound and fraction.

Usage: ``omnigym bench async_vs_sync [--quick] [--settings NAME ...] [--runtimes async ray]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _async_workloads import (
    ENV_ID,
    VLM_ENV_ID,
    ThreadVectorEnv,
    latency_option,
    make_click_slots,
    overlap_bound,
    reply_lengths,
    tiny_model,
)

DURATIONS = {"quick": "about 7.5 min (beside two training jobs)", "full": "not recorded"}
"""Quick: timed 2026-12-03 on the 2-core CPU beside two training jobs (its own workers loading it
further). Full: not timed in its present form (docs/runtime.md's 10 min predates the long-tail and
VLM workloads)."""


def experiment(runtime: str, setting: dict[str, Any], steps: int, seed: int, run_dir: Path) -> Any:
    """The experiment config both runtimes share (only ``runtime`` differs)."""
    import torch

    from omnigym.platform.experiment import build_experiment

    num_envs = setting["num_envs"]
    if setting.get("kind") == "vlm":  # the GUI task's text, read by a tiny language model
        env: dict[str, Any] = {"id": VLM_ENV_ID, "num_envs": num_envs, "kwargs": {"obs_keys": ["text"]}}
        policy: dict[str, Any] = {
            "type": "vlm",
            "model": str(tiny_model()),
            "obs_keys": ["text"],
            "max_new_tokens": setting["max_new_tokens"],
            "max_prompt_tokens": 512,
        }
    else:
        env = {"id": ENV_ID, "num_envs": num_envs, "kwargs": {"latency": latency_option(setting)}}
        policy = {"type": "mlp", "hidden_sizes": setting["hidden_sizes"]}
    return build_experiment(
        {
            "name": f"async_vs_sync_{runtime}",
            "seed": seed,
            "total_steps": steps,
            "run_dir": str(run_dir),
            "env": env,
            "policy": policy,
            "algo": {
                "type": "decoupled_ppo",
                "num_steps": setting["num_steps"],
                "num_epochs": setting["num_epochs"],
                "num_minibatches": setting.get("num_minibatches", 4),
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
                "async": {"workers": setting["workers"] if runtime == "async" else "thread"},
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
    vlm = setting.get("kind") == "vlm"
    if vlm:  # before the workers copy the policy: each copy draws its own lengths
        eos = trainer.policy.processor.eos_token_id
        trainer.policy.logits_processors = [reply_lengths(setting, eos)]

    def thread_envs(env_config: Any) -> ThreadVectorEnv:
        return ThreadVectorEnv(
            [make_click_slots(latency=latency_option(setting)) for _ in range(env_config.num_envs)]
        )

    if (
        runtime == "async"
        and not vlm
        and (setting["num_workers"] < config.env.num_envs or setting["workers"] == "process")
    ):
        trainer.runtime = AsyncRuntime(config, trainer.policy, make_envs=thread_envs)
    if runtime == "ray":  # the actors build the envs themselves (this module travels by value)
        trainer.runtime = RayRuntime(config, trainer.policy, make_envs=thread_envs)
    if runtime == "local" and not vlm:  # the careful user's vector env: the N latencies overlap
        trainer.envs.close()
        trainer.envs = ThreadVectorEnv(
            [make_click_slots(latency=latency_option(setting)) for _ in range(config.env.num_envs)]
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
    evaluation = None
    if not vlm:  # a random language model clicks nothing: only its speed is measured
        result = evaluate_policy(policy, ENV_ID, episodes=100, seed=10_000, deterministic=True, num_envs=10)
        evaluation = result.summary()["return_mean"]
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
        "eval_return": evaluation,
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
        for key in ("train/ess", "train/behaviour_kl"):
            values = [m[key] for m in lines if key in m]
            out[key] = float(np.mean(values)) if values else None
        out["ess_min"] = min((m["train/ess"] for m in lines if "train/ess" in m), default=None)
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
LONG_TAIL = {"dist": "lognormal", "median_ms": 20, "sigma": 1.0, "max_ms": 1000}
"""A page that usually answers in 20 ms and now and then in 100-500 (mean 33 ms; the slowest of 8
simultaneous steps takes 102 ms on average, the slowest of 2 takes 50)."""
BASE = {
    "num_envs": 8,
    "num_steps": 32,
    "num_workers": 2,
    "workers": "thread",
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
    "long-tail": {**BASE, "num_epochs": 8, "num_workers": 4, "latency": LONG_TAIL},
    "long-tail, process workers": {
        **BASE,
        "num_epochs": 8,
        "num_workers": 4,
        "workers": "process",
        "latency": LONG_TAIL,
    },
    "vlm": {
        "kind": "vlm",
        "num_envs": 8,
        "num_steps": 4,
        "num_workers": 4,
        "workers": "process",
        "num_epochs": 1,
        "num_minibatches": 2,
        "learning_rate": 1e-5,
        "samples": 256,
        "reply_median": 8,
        "reply_sigma": 1.0,
        "max_new_tokens": 96,
        "latency": 0.0,
    },
}
"""Settings of the sweep: ``num_epochs`` moves the learner's time per sample (about 0.15, 0.8 and
2 times the env's in the local loop, on an idle core); the next two change the latency's jitter and
the split of the envs between workers (2 workers of 4 envs by default). The long-tail workload has
log-normal latencies and 4 workers of 2 envs (threads, or processes). The MLP is wide (2 x 2048) so
that the learner's time is spent in kernels, as a real learner's is, rather than in Python."""
WORKLOADS = {"balanced GUI": "balanced", "long-tail GUI": "long-tail", "variable-length VLM": "vlm"}
"""The workloads the JSON reports, and the setting each is measured with."""
SEEDS = {"balanced": (1, 2), "long-tail": (1, 2, 3), "long-tail, process workers": (1, 2, 3)}
"""Seeds of the full run (1 for the rest): learning parity on the long-tail workload over 3."""
QUICK = ("balanced", "long-tail", "vlm")


def workers_text(setting: dict[str, Any]) -> str:
    """``4 threads x 2 envs``: how the async run splits the envs."""
    per_worker = setting["num_envs"] // setting["num_workers"]
    return f"{setting['num_workers']} {setting['workers']} workers x {per_worker} envs"


RUNS: dict[tuple[Any, ...], dict[str, Any]] = {}
"""Runs by (runtime, seed, steps, setting without its worker kind): settings that differ only in the
async workers' kind share their local and ray runs."""


def compare(name: str, steps: int, seed: int, root: Path, runtimes: tuple[str, ...]) -> dict[str, Any]:
    """The runtimes on one setting; returns their figures and the ratios to ``local``."""
    setting = SETTINGS[name]
    row: dict[str, Any] = {
        "setting": name,
        "num_epochs": setting["num_epochs"],
        "latency": latency_option(setting),
        "workers": workers_text(setting),
    }
    if setting["workers"] == "process":  # Ray actors are processes already: the thread row has them
        runtimes = tuple(r for r in runtimes if r != "ray")
    for runtime in runtimes:
        key = (runtime, seed, steps, json.dumps({k: v for k, v in setting.items() if k != "workers"}))
        if runtime != "async" and key in RUNS:  # the same local (or ray) run as another setting's
            row[runtime] = RUNS[key]
            continue
        row[runtime] = RUNS[key] = train(
            runtime, setting, steps, seed, root / f"{name}-{runtime}-{seed}".replace(" ", "_")
        )
    local = row["local"]
    row["learner_over_env"] = local["update_s"] / local["collect_s"]
    row["ratio"] = row["async"]["sps"] / local["sps"]
    row["overlap_bound"] = overlap_bound(setting, local)
    row["bound_fraction"] = row["ratio"] / row["overlap_bound"]
    row["ratio_steady"] = row["async"]["sps_steady"] / local["sps_steady"]
    if "ray" in row:
        row["ray_ratio"] = row["ray"]["sps"] / local["sps"]
        row["ray_ratio_steady"] = row["ray"]["sps_steady"] / local["sps_steady"]
    return row


def shown(value: float | None) -> str:
    """A figure for the table (``-`` where there is none)."""
    return "  -  " if value is None else f"{value:5.2f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per setting, then the learning curves."""
    header = (
        "setting",
        "epochs",
        "learn/env",
        "local sps",
        "async sps",
        "ratio",
        "bound",
        "env util",
        "lrn util",
    )
    print(f"{header[0]:30s}", " ".join(f"{h:>9s}" for h in header[1:]), f"{'stale':>5s} {'eval L/A':>11s}")
    for row in rows:
        a, loc = row["async"], row["local"]
        numbers = (
            row["num_epochs"],
            row["learner_over_env"],
            loc["sps"],
            a["sps"],
            row["ratio"],
            row["overlap_bound"],
            a["runtime/env_util"],
            a["runtime/learner_util"],
        )
        print(
            f"{row['setting']:30s}",
            " ".join(f"{n:9.2f}" for n in numbers),
            f"{a['runtime/staleness_mean']:5.2f} {shown(loc['eval_return'])}/{shown(a['eval_return'])}",
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
    ray.cloudpickle.register_pickle_by_value(sys.modules["_async_workloads"])
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
    parser.add_argument(
        "--quick", action="store_true", help="the balanced and long-tail settings, 4096 samples each"
    )
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
    parser.add_argument(
        "--settings",
        nargs="+",
        choices=tuple(SETTINGS),
        default=None,
        metavar="SETTING",
        help=f"settings to run (default: all, or the quick ones); any of {', '.join(map(repr, SETTINGS))}",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=None,
        help="seeds of every setting (default: 1; the full run gives balanced 1 2 and long-tail 1 2 3)",
    )
    parser.add_argument(
        "--samples", type=int, default=None, help="samples per run (default: 4096; the full balanced: 16384)"
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
    names = args.settings or (QUICK if args.quick else tuple(SETTINGS))
    rows = []
    for name in names:
        long_run = name == "balanced"
        seeds = (1,) if args.quick else SEEDS.get(name, (1,))
        seeds = tuple(args.seeds) if args.seeds else seeds
        for seed in seeds:
            samples = SETTINGS[name].get("samples", steps if args.quick or not long_run else 4 * steps)
            samples = args.samples or samples
            row = compare(name, samples, seed, out, runtimes)
            row["seed"] = seed
            ran = [r for r in runtimes if r in row]
            row["curve_bins"] = {r: binned(row[r]["curve"], row[r]["samples"], 8) for r in ran}
            rows.append(row)
            print(f"# {name} seed {seed}: ratio {row['ratio']:.2f}", file=sys.stderr, flush=True)
    print_table(rows)
    if "ray" in runtimes:  # before the result: nothing Ray prints while stopping may follow it
        import ray

        ray.shutdown()
    workloads = workload_figures(rows)
    figures = {
        "ratio": workloads.get("long-tail GUI", {}).get("ratio"),
        "ratio_balanced": workloads.get("balanced GUI", {}).get("ratio"),
        "workloads": workloads,
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
                "workers": row["workers"],
                "ratio": round(row["ratio"], 3),
                "overlap_bound": round(row["overlap_bound"], 3),
                "bound_fraction": round(row["bound_fraction"], 3),
                "ess_mean": row["async"]["train/ess"],
                "ess_min": row["async"]["ess_min"],
                "behaviour_kl_mean": row["async"]["train/behaviour_kl"],
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
    print(json.dumps(figures), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown output (thread pools, Ray's core worker) after the result


def workload_figures(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per workload: the async/sync ratio, the overlap bound and the share of it reached.

    Means over seeds; with the process workers' figures and Ray's ratio where they ran.
    """
    out: dict[str, dict[str, Any]] = {}
    for workload, setting in WORKLOADS.items():
        mine = [row for row in rows if row["setting"] == setting]
        if not mine:
            continue
        figures: dict[str, Any] = {
            "setting": setting,
            "workers": mine[0]["workers"],
            "ratio": round(float(np.mean([row["ratio"] for row in mine])), 3),
            "overlap_bound": round(float(np.mean([row["overlap_bound"] for row in mine])), 3),
            "bound_fraction": round(float(np.mean([row["bound_fraction"] for row in mine])), 3),
        }
        if mine[0]["local"]["eval_return"] is not None:  # learning parity: final evaluation per seed
            figures["eval_return_local"] = [row["local"]["eval_return"] for row in mine]
            figures["eval_return_async"] = [row["async"]["eval_return"] for row in mine]
        if "ray" in mine[0]:
            figures["ray_ratio"] = round(float(np.mean([row["ray_ratio"] for row in mine])), 3)
        processes = [row for row in rows if row["setting"] == f"{setting}, process workers"]
        if processes:
            figures["process_ratio"] = round(float(np.mean([row["ratio"] for row in processes])), 3)
            figures["process_bound_fraction"] = round(
                float(np.mean([row["bound_fraction"] for row in processes])), 3
            )
            figures["eval_return_process"] = [row["async"]["eval_return"] for row in processes]
        out[workload] = figures
    return out


if __name__ == "__main__":
    main()
