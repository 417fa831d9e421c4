"""Dream vs real: SAC trained only inside a learned Pendulum-v1 model vs SAC on the real env.

Per seed, on Pendulum-v1:

1. Real: ``configs/experiment/sac_pendulum.yaml`` for ``S`` real env steps (random actions for the
   first 1,000, then one SAC update per step: ``S - 1000`` updates), checkpoints every ``S / 4``.
2. Dream: ``configs/experiment/sac_pendulum_dream.yaml``: ``C`` real steps of uniform random
   actions (``C = S``: the same real-data budget; one episode held out), the ensemble world model
   fitted with early stopping, then the same SAC for ``S`` steps *in the model* (the same
   ``S - 1000`` updates; exact Pendulum reward, live start states).
3. Both final policies run 10 deterministic episodes in the real env (the same seeds). Pendulum's
   returns are negative, so the score is relative to a uniform random policy (same seeds):
   ``(dream - random) / (real - random)`` (1: as good as real-trained; target >= 0.8).
4. Fidelity of the seed-1 model: open-loop k-step errors on the held-out real episode, and the
   Spearman rank correlation between model and real returns of 5 policies: the real run's four
   checkpoints and the random policy (same start states in both: live resets with equal seeds).

Throughput (one process, one torch thread, CPU): Hopper-v5's world-model env (the default MBPO
ensemble, 7 members of 200x4, fitted for one epoch on 2,000 random transitions: quality does not
change speed; learned reward, known termination) stepping 1,024 and 4,096 rows with random
actions, vs a Gymnasium ``SyncVectorEnv`` of 16 real Hopper-v5 envs. ``ratio`` = world-model env
steps/s (4,096 rows) / real env steps/s.

Full: seeds 1-3, S = 4,000. ``--quick``: seed 1, S = 3,000, 5 episodes for the ranking.
Last line: one JSON object with ``ratio`` and every figure.

Usage: ``omnigym bench dream_vs_real [--quick] [--out DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ENV_ID = "Pendulum-v1"
MUJOCO_ID = "Hopper-v5"
LEARNING_STARTS = 1000
EVAL_SEED = 1_000_000
COMMON = ["log.progress=false", "log.tensorboard=false", f"algo.learning_starts={LEARNING_STARTS}"]


def train(experiment: str, run_dir: Path, overrides: list[str]) -> float:
    """Train ``experiment`` into ``run_dir``; its final real-env mean return."""
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers import build_trainer

    config = load_experiment(experiment, [*COMMON, *overrides, f"run_dir={run_dir}"])
    return float(build_trainer(config, run_dir).train().final_eval["return_mean"])


def random_return(episodes: int) -> float:
    """A uniform random policy's mean real return over the evaluation seeds."""
    from omnigym.platform.cli import resolve_policy
    from omnigym.platform.evaluate import evaluate_policy

    policy = resolve_policy("random", ENV_ID)
    return float(
        np.mean(
            evaluate_policy(policy, ENV_ID, episodes=episodes, seed=EVAL_SEED, deterministic=False).returns
        )
    )


def ranking(real_run: Path, model_dir: Path, episodes: int) -> tuple[list[dict[str, Any]], float]:
    """Model vs real returns of the real run's checkpoints and the random policy; Spearman."""
    from omnigym.platform.cli import resolve_policy
    from omnigym.platform.trainers.model_based import RankedPolicy, rank_policies
    from omnigym.policies.base import Policy
    from omnigym.world_models.env import WorldModelEnvConfig

    policies = [
        RankedPolicy(f"sac@{int(d.name.split('_')[1])}", Policy.from_pretrained(d / "policy"))
        for d in sorted((real_run / "checkpoints").glob("step_*"))
    ]
    policies.append(RankedPolicy("random", resolve_policy("random", ENV_ID), deterministic=False))
    env_config = WorldModelEnvConfig(reward="known", termination="known")
    rows, rho = rank_policies(
        policies, model_dir, ENV_ID, episodes=episodes, seed=EVAL_SEED, env_config=env_config
    )
    return [vars(r) for r in rows], rho


def throughput(
    rows: tuple[int, ...] = (1024, 4096), real_envs: int = 16, seconds: float = 5.0
) -> dict[str, float]:
    """Hopper-v5 env steps/s: the ensemble world-model env at each row count, and real SyncVectorEnv."""
    import gymnasium as gym
    import torch

    from omnigym.platform.buffers import ReplayBuffer
    from omnigym.platform.vec_env import make_env
    from omnigym.world_models.ensemble import EnsembleDynamics, EnsembleDynamicsConfig
    from omnigym.world_models.env import WorldModelVectorEnv
    from omnigym.world_models.training import fit_world_model

    env = make_env(MUJOCO_ID)
    buffer = ReplayBuffer(env.observation_space, env.action_space, 2000)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    for _ in range(2000):
        action = env.action_space.sample()
        nxt, reward, terminated, truncated, _ = env.step(action)
        batch = {k: v[None] for k, v in obs.items()}
        buffer.add(
            batch, action[None], [reward], {k: v[None] for k, v in nxt.items()}, [terminated], [truncated]
        )
        obs = env.reset()[0] if terminated or truncated else nxt
    torch.manual_seed(0)
    model = EnsembleDynamics(EnsembleDynamicsConfig(), env.observation_space, env.action_space)
    fit_world_model(model, buffer, max_epochs=1, callback=lambda *_: None)
    starts = buffer.all().obs["state"]
    out: dict[str, float] = {}
    for n in rows:
        wm = WorldModelVectorEnv(model, n, start_states=starts, env_id=MUJOCO_ID, termination="known")
        wm.reset(seed=0)
        actions = rng.uniform(-1, 1, size=(16, n, *env.action_space.shape)).astype(np.float32)
        out[f"world_model_{n}"] = _steps_per_second(wm.step, actions, n, seconds)
        wm.close()
    real = gym.vector.SyncVectorEnv([lambda: gym.make(MUJOCO_ID)] * real_envs)
    real.reset(seed=0)
    actions = rng.uniform(-1, 1, size=(16, real_envs, *env.action_space.shape)).astype(np.float32)
    out["real"] = _steps_per_second(real.step, actions, real_envs, seconds)
    real.close()
    env.close()
    return out


def _steps_per_second(step: Any, actions: np.ndarray, rows: int, seconds: float) -> float:
    """Env steps/s of ``step`` over at least ``seconds`` (cycling through ``actions``), after 3 warm-ups."""
    for i in range(3):
        step(actions[i])
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step(actions[calls % len(actions)])
        calls += 1
    return calls * rows / elapsed


def main() -> None:
    """Real SAC, dream SAC, random; fidelity of the model; throughput. The last line is JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="seed 1, 3,000 steps, 5 ranking episodes")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 1 2 3; quick: 1)")
    parser.add_argument("--out", default=None, help="keep the runs and models here (default: a temp dir)")
    args = parser.parse_args()
    import torch

    from omnigym.world_models.fidelity import DreamVsReal, FidelityReport, PolicyReturn

    torch.set_num_threads(1)
    steps = 3000 if args.quick else 4000
    seeds = args.seeds or ([1] if args.quick else [1, 2, 3])
    rank_episodes = 5 if args.quick else 10
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")  # the collected data stays with the runs
        random = random_return(10)
        runs: dict[str, dict[str, float]] = {}
        for seed in seeds:
            common = [f"seed={seed}", f"total_steps={steps}", "eval.episodes=10", f"eval.every_steps={steps}"]
            real = train(
                "sac_pendulum",
                root / f"real_{seed}",
                [*common, f"checkpoint.every_steps={steps // 4}", "checkpoint.keep=8"],
            )
            dream = train(
                "sac_pendulum_dream", root / f"dream_{seed}",
                [*common, f"model_based.collect_steps={steps}", "model_based.max_epochs=200"],
            )  # fmt: skip
            runs[str(seed)] = {
                "real": real,
                "dream": dream,
                "score": DreamVsReal(dream, real, random, steps).score,
            }
            print(
                f"seed {seed}: real-trained {real:.1f}, dream-trained {dream:.1f}, random {random:.1f}",
                flush=True,
            )
        real_mean = float(np.mean([r["real"] for r in runs.values()]))
        dream_mean = float(np.mean([r["dream"] for r in runs.values()]))
        summary = DreamVsReal(dream_mean, real_mean, random, steps - LEARNING_STARTS)
        model_dir = root / f"dream_{seeds[0]}" / "world_model"
        rows, rho = ranking(root / f"real_{seeds[0]}", model_dir, rank_episodes)
        report = FidelityReport.load(model_dir)
        assert report is not None
        report.policies = [PolicyReturn(**r) for r in rows]
        report.rank_correlation, report.dream_vs_real = rho, summary
        report.write(model_dir)
        speed = throughput(seconds=2.0 if args.quick else 5.0)
    ratio = speed["world_model_4096"] / speed["real"]
    print()
    print(report.to_markdown())
    print(f"Per seed (real return): {json.dumps(runs)}")
    print(
        f"Throughput ({MUJOCO_ID}, 1 thread): world model {speed['world_model_1024']:,.0f} steps/s "
        "(1,024 rows), "
        f"{speed['world_model_4096']:,.0f} steps/s (4,096 rows); real SyncVectorEnv x16 {speed['real']:,.0f} "
        f"steps/s; ratio {ratio:.2f}"
    )
    print(json.dumps({
        "bench": "dream_vs_real", "ratio": ratio, "throughput": speed,
        "dream_return": dream_mean, "real_return": real_mean, "random_return": random,
        "dream_score": summary.score, "target_score": 0.8, "updates": steps - LEARNING_STARTS,
        "real_steps": steps, "runs": runs, "spearman": rho, "ranking": rows,
        "k_step": [vars(r) for r in report.k_step], "seeds": seeds, "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
