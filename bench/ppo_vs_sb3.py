"""omnigym PPO vs Stable-Baselines3 PPO: training speed and return at equal steps.

Both train the same network (64-64 tanh actor and critic, orthogonal init) with the same
hyperparameters on the same env, each in its own fresh process (so neither inherits the other's
torch settings) with the same torch thread count (``--threads N``, default ``$OMNIGYM_THREADS``,
else 1; ``torch_threads`` in the JSON), one after the other. Both are then evaluated with the same
seeds. The README's table is a full run with ``--threads 1``; figures measured before ``--threads``
existed ran omnigym on one thread (its ``runtime.torch_threads``) and SB3 on torch's default, one
thread per core (2 on the 2-core machine), and the README gives them beside it.

The value losses are made equal: SB3 uses ``vf_coef * mean((R - V)^2)`` without value clipping,
which is omnigym's ``clip_vloss=False`` with ``vf_coef`` doubled (omnigym keeps CleanRL's 0.5).

Returns at equal steps vary a lot between training seeds (HalfCheetah at 100k steps spans
about -200 to 700 for either library), so the full run trains 5 seeds of each and reports the
means, their standard errors and the per-seed values.

Last line: one JSON object; ``ratio`` = omnigym steps/s / SB3 steps/s (seed means), the smaller of
the envs.

Usage: ``omnigym bench ppo_vs_sb3 [--quick] [--threads N]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

DURATIONS = {"quick": "about 30 s", "full": "about 19 min"}
"""On a 2-core CPU: README.md, "Benchmark: PPO against Stable-Baselines3"; no full run time recorded."""

# Per env: shared hyperparameters (SB3 names), steps for the full and quick runs.
SETUPS: dict[str, dict[str, Any]] = {
    "CartPole-v1": {  # RL Zoo's tuned CartPole settings
        "n_envs": 8, "n_steps": 32, "batch_size": 256, "n_epochs": 20, "learning_rate": 1e-3,
        "anneal": True, "gamma": 0.98, "gae_lambda": 0.8, "ent_coef": 0.0, "clip_range": 0.2,
        "steps": 100_000, "quick_steps": 20_480,
    },
    "HalfCheetah-v5": {  # SB3 / CleanRL defaults
        "n_envs": 1, "n_steps": 2048, "batch_size": 64, "n_epochs": 10, "learning_rate": 3e-4,
        "anneal": False, "gamma": 0.99, "gae_lambda": 0.95, "ent_coef": 0.0, "clip_range": 0.2,
        "steps": 102_400, "quick_steps": 10_240,
    },
}  # fmt: skip
EVAL_EPISODES = 10
EVAL_SEED = 1000


def train_sb3(env_id: str, setup: dict[str, Any], steps: int, seed: int) -> dict[str, Any]:
    """Train SB3 PPO; returns steps/s and the evaluation."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from omnigym.platform.evaluate import evaluate_policy

    lr = setup["learning_rate"]
    model = PPO(
        "MlpPolicy",
        make_vec_env(env_id, n_envs=setup["n_envs"], seed=seed),
        n_steps=setup["n_steps"],
        batch_size=setup["batch_size"],
        n_epochs=setup["n_epochs"],
        learning_rate=(lambda progress: lr * progress) if setup["anneal"] else lr,
        gamma=setup["gamma"],
        gae_lambda=setup["gae_lambda"],
        ent_coef=setup["ent_coef"],
        clip_range=setup["clip_range"],
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    seconds = time.perf_counter() - start
    trained = model.num_timesteps
    recent = [ep["r"] for ep in list(model.ep_info_buffer)[-10:]]

    def act(obs: dict) -> Any:
        return model.predict(obs["state"], deterministic=True)[0]

    is_discrete = isinstance(gym.make(env_id).action_space, gym.spaces.Discrete)
    result = evaluate_policy(act, env_id, episodes=EVAL_EPISODES, seed=EVAL_SEED)
    return {
        "steps": trained,
        "seconds": seconds,
        "sps": trained / seconds,
        "train_return_last10": sum(recent) / max(1, len(recent)),
        "eval_return": result.summary()["return_mean"],
        "discrete": is_discrete,
        "torch_threads": torch.get_num_threads(),
    }


def train_omnigym(env_id: str, setup: dict[str, Any], steps: int, seed: int) -> dict[str, Any]:
    """Train omnigym PPO with the same settings; returns steps/s and the evaluation."""
    import torch

    from omnigym.platform.experiment import build_experiment
    from omnigym.platform.trainers.on_policy import OnPolicyTrainer

    config = build_experiment(
        {
            "name": "bench_ppo",
            "seed": seed,
            "total_steps": steps,
            # a fresh directory per run: a bench must run again without refusing its last run's
            "run_dir": tempfile.mkdtemp(prefix=f"omnigym-bench-ppo-{env_id}-{seed}-"),
            "env": {"id": env_id, "num_envs": setup["n_envs"]},
            "policy": {"type": "mlp", "hidden_sizes": [64, 64], "activation": "tanh"},
            "algo": {
                "type": "ppo",
                "num_steps": setup["n_steps"],
                "num_epochs": setup["n_epochs"],
                "num_minibatches": setup["n_steps"] * setup["n_envs"] // setup["batch_size"],
                "learning_rate": setup["learning_rate"],
                "anneal_lr": setup["anneal"],
                "gamma": setup["gamma"],
                "gae_lambda": setup["gae_lambda"],
                "ent_coef": setup["ent_coef"],
                "clip_coef": setup["clip_range"],
                "clip_vloss": False,
                "vf_coef": 1.0,  # = SB3's 0.5 without the 0.5 factor
                "max_grad_norm": 0.5,
            },
            "eval": {"every_steps": 0, "episodes": EVAL_EPISODES, "seed": EVAL_SEED},
            "log": {"progress": False, "tensorboard": False},
            "runtime": {"torch_threads": torch.get_num_threads()},  # the worker's --threads
        }
    )
    trainer = OnPolicyTrainer(config, config.run_dir)
    returns: list[float] = []
    start = time.perf_counter()
    while trainer.iteration < trainer.num_iterations:
        metrics = trainer.train_iteration()
        if "rollout/episode_return" in metrics:
            returns.append(metrics["rollout/episode_return"])
    seconds = time.perf_counter() - start
    eval_return = trainer.evaluate()["eval/return_mean"]
    trainer.envs.close()
    return {
        "steps": trainer.global_step,
        "seconds": seconds,
        "sps": trainer.global_step / seconds,
        "train_return_last10": sum(returns[-10:]) / max(1, len(returns[-10:])),
        "eval_return": eval_return,
        "torch_threads": torch.get_num_threads(),
    }


def run_worker(which: str, env_id: str, quick: bool, seed: int, threads: int) -> dict[str, Any]:
    """Run one training in a fresh interpreter on ``threads`` torch threads and parse its JSON line."""
    cmd = [sys.executable, __file__, "--worker", which, "--env", env_id, "--seed", str(seed)]
    cmd += ["--threads", str(threads)]
    out = subprocess.run([*cmd, *(["--quick"] if quick else [])], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{which} on {env_id} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run every setup for both libraries and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (under a minute)")
    parser.add_argument("--seed", type=int, default=1, help="first seed")
    parser.add_argument("--seeds", type=int, help="number of seeds (default: 5, or 1 with --quick)")
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="torch CPU threads of every run (default $OMNIGYM_THREADS, else 1)",
    )  # fmt: skip
    parser.add_argument("--worker", choices=["sb3", "omnigym"], help=argparse.SUPPRESS)
    parser.add_argument("--env", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from omnigym.platform.runtime import apply_thread_policy

    threads = apply_thread_policy(args.threads)
    if args.worker:
        setup = SETUPS[args.env]
        steps = setup["quick_steps" if args.quick else "steps"]
        train = train_sb3 if args.worker == "sb3" else train_omnigym
        print(json.dumps(train(args.env, setup, steps, args.seed)))
        return

    seeds = list(range(args.seed, args.seed + (args.seeds or (1 if args.quick else 5))))
    figures: dict[str, Any] = {
        "bench": "ppo_vs_sb3",
        "quick": args.quick,
        "seeds": seeds,
        "torch_threads": threads,
    }
    ratios = []
    for env_id in SETUPS:
        runs = {
            lib: [run_worker(lib, env_id, args.quick, s, threads) for s in seeds]
            for lib in ("sb3", "omnigym")
        }
        summary = {lib: summarize_runs(r) for lib, r in runs.items()}
        ours, sb3 = summary["omnigym"], summary["sb3"]
        ratio = ours["sps"] / sb3["sps"]
        ratios.append(ratio)
        print(
            f"{env_id} ({len(seeds)} seed(s), {ours['steps']} steps): steps/s omnigym {ours['sps']:.0f} "
            f"vs SB3 {sb3['sps']:.0f} (x{ratio:.2f}); eval return omnigym {ours['eval_return']:.1f} "
            f"+- {ours['eval_return_se']:.1f} (seeds {ours['eval_returns']}) vs SB3 {sb3['eval_return']:.1f} "
            f"+- {sb3['eval_return_se']:.1f} (seeds {sb3['eval_returns']}); "
            f"train return, last 10 episodes: omnigym {ours['train_return_last10']:.1f} vs SB3 "
            f"{sb3['train_return_last10']:.1f}",
            flush=True,
        )
        figures[env_id] = {**summary, "sps_ratio": ratio, "runs": runs}
    figures["ratio"] = min(ratios)
    print(json.dumps(figures))


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds: steps/s, evaluation and training returns."""
    mean = lambda key: sum(r[key] for r in runs) / len(runs)  # noqa: E731
    evals = [r["eval_return"] for r in runs]
    spread = (sum((x - mean("eval_return")) ** 2 for x in evals) / max(1, len(evals) - 1)) ** 0.5
    return {
        "steps": runs[0]["steps"],
        "sps": mean("sps"),
        "eval_return": mean("eval_return"),
        "eval_return_se": spread / len(evals) ** 0.5,  # standard error of the mean over seeds
        "eval_returns": [round(r["eval_return"], 1) for r in runs],
        "train_return_last10": mean("train_return_last10"),
    }


if __name__ == "__main__":
    main()
