"""omnigym SAC vs Stable-Baselines3 SAC: gradient updates/s on the same transitions, and a learning check.

Updates/s (the headline): both libraries' SAC with the same settings, omnigym's
``configs/algo/sac.yaml`` and ``configs/policy/sac_actor.yaml`` (observation normalisation off),
SB3 configured to match them: 256-256 ReLU actor and twin critics, batch 256, learning rates 3e-4,
gamma 0.99, tau 0.005, automatic entropy tuning from alpha = 1 towards -|A|, one gradient step per
update. Both replay buffers hold the same N random-action Hopper-v5 transitions (collected once in
the parent process, handed to both as one ``.npz``; true final observations at episode ends,
time-limit ends bootstrap in both). Each library then times K updates after a short untimed
warm-up, sampling included: omnigym ``algorithm.update(buffer.sample(256, generator))`` in a loop,
SB3 ``model.train(gradient_steps=K, batch_size=256)`` (its own loop: sample, temperature, critic,
actor, Polyak). Network building and buffer filling are not timed. Each measurement runs in a fresh
process (so neither library inherits the other's torch settings) with the same torch thread count
(``--threads``); the libraries alternate over ``--repeats`` and the medians are compared, since this
machine's timings move by 10-40 % between runs.

SB3's critic loss is half of omnigym's (``0.5 * sum of MSEs``); Adam is invariant to that scale.

Learning check: each library trains SAC on Pendulum-v1 for the same env steps (random actions for
the first 1,000, then one update per env step; SB3's default SAC otherwise, omnigym's
``configs/experiment/sac_pendulum.yaml``), same training seed, then runs 10 deterministic
episodes with omnigym's ``evaluate_policy`` on the same episode seeds. The seconds cover training
and that final evaluation. One seed: a sanity row (both should be far above random, about -1,500),
not a statistical comparison.

Full run: N = 50,000 transitions, K = 2,000 updates, 3 repeats, Pendulum 6,000 steps.
``--quick``: N = 5,000, K = 300, 1 repeat, Pendulum 3,000 steps (a few minutes).

Matrix products: after the timed updates each worker runs ``PROFILED_UPDATES`` more under torch's
profiler and reports the milliseconds per update in matrix products (``aten::mm``, ``addmm``,
``bmm``, ``baddbmm``: every linear layer, forward and backward). Both libraries do the same
products, so ``ratio_ceiling`` = SB3's time per update / omnigym's product time is the most any
SAC here could gain over SB3 (everything but the products free); ``matrix_product_share`` is the
products' part of omnigym's update. The profiler slows the ops it records a little.

Last line: one JSON object; ``ratio`` = omnigym updates/s / SB3 updates/s (medians over repeats).

Usage: ``omnigym bench sac_vs_sb3 [--quick]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DURATIONS = {"quick": "about 3.5 min (beside two training jobs)", "full": "not recorded"}
"""Quick: timed 2026-12-03 on the 2-core CPU beside two training jobs; full: not timed (the docs
time only its Pendulum check, 71 s and 85 s)."""

REPO = Path(__file__).resolve().parents[1]
ENV_ID = "Hopper-v5"
PENDULUM = "Pendulum-v1"
BATCH_SIZE = 256
WARMUP_UPDATES = 20
LEARNING_STARTS = 1000
EVAL_EPISODES = 10
EVAL_SEED = 1000
PROFILED_UPDATES = 100
"""Updates run under torch's profiler after the timed ones, to measure the matrix products' share."""
MATRIX_PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
"""The ops of every linear layer forward and backward (plain, batched, with bias)."""


def matrix_product_ms(run: Any, updates: int) -> float:
    """Milliseconds per update spent in matrix products while ``run()`` makes ``updates`` updates.

    Both libraries do the same products (same layers, batch and updates), so this is the part of
    an update no library overhead can remove; the rest is what a faster library saves.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    total_us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in MATRIX_PRODUCTS)
    return total_us / 1000 / updates


def load_configs() -> tuple[dict[str, Any], dict[str, Any]]:
    """The SAC algorithm and actor YAMLs of omnigym as plain dicts (observation normalisation off)."""
    from omnigym.core.config import load_yaml

    algo = load_yaml(REPO / "configs/algo/sac.yaml")
    policy = {**load_yaml(REPO / "configs/policy/sac_actor.yaml"), "normalize_obs": False}
    return algo, policy


def collect(path: Path, n: int, seed: int) -> None:
    """``n`` uniform-random-action Hopper-v5 transitions, saved to ``path`` (``.npz``)."""
    from omnigym.platform.vec_env import make_env

    env = make_env(ENV_ID)
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    actions = rng.uniform(low, high, size=(n, *env.action_space.shape)).astype(np.float32)
    obs_dim = env.observation_space["state"].shape
    obs = np.zeros((n, *obs_dim), dtype=np.float32)
    next_obs = np.zeros_like(obs)
    rewards = np.zeros(n, dtype=np.float32)
    terminated = np.zeros(n, dtype=bool)
    truncated = np.zeros(n, dtype=bool)
    current, _ = env.reset(seed=seed)
    for i in range(n):
        nxt, reward, term, trunc, _ = env.step(actions[i])
        obs[i], next_obs[i], rewards[i] = current["state"], nxt["state"], reward
        terminated[i], truncated[i] = term, trunc
        current = env.reset()[0] if term or trunc else nxt
    env.close()
    np.savez(
        path, obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminated=terminated,
        truncated=truncated,
    )  # fmt: skip


def updates_omnigym(data: dict[str, np.ndarray], updates: int, seed: int) -> dict[str, Any]:
    """Time ``updates`` omnigym SAC updates (sampling included) on the given transitions."""
    import torch

    from omnigym.core.config import build_dataclass
    from omnigym.core.registry import ALGORITHMS, POLICIES
    from omnigym.platform.buffers import ReplayBuffer
    from omnigym.platform.seeding import seed_everything
    from omnigym.platform.vec_env import make_env

    seed_everything(seed)
    algo_data, policy_data = load_configs()
    env = make_env(ENV_ID)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    policy_cls, algo_cls = POLICIES.get(policy_data["type"]), ALGORITHMS.get(algo_data["type"])
    policy = policy_cls(build_dataclass(policy_cls.config_class, policy_data), obs_space, act_space)
    algorithm = algo_cls(build_dataclass(algo_cls.config_class, algo_data), policy, obs_space, act_space)
    n = len(data["rewards"])
    buffer = ReplayBuffer(obs_space, act_space, n)
    buffer.add(
        {"state": data["obs"]}, data["actions"], data["rewards"], {"state": data["next_obs"]},
        data["terminated"], data["truncated"],
    )  # fmt: skip
    generator = torch.Generator().manual_seed(seed)
    for _ in range(WARMUP_UPDATES):
        algorithm.update(buffer.sample(BATCH_SIZE, generator))
    start = time.perf_counter()
    for _ in range(updates):
        metrics = algorithm.update(buffer.sample(BATCH_SIZE, generator))
    seconds = time.perf_counter() - start

    def profiled() -> None:
        for _ in range(PROFILED_UPDATES):
            algorithm.update(buffer.sample(BATCH_SIZE, generator))

    return {
        "updates_per_s": updates / seconds,
        "seconds": seconds,
        "alpha": metrics["train/alpha"],  # after the last update
        "critic_loss": metrics["train/critic_loss"],
        "matrix_product_ms": matrix_product_ms(profiled, PROFILED_UPDATES),
    }


def sb3_sac(env: Any, seed: int, **overrides: Any) -> Any:
    """SB3's SAC with the settings of omnigym's YAMLs (asserted SB3's defaults where they are)."""
    import torch
    from stable_baselines3 import SAC

    cfg, policy_cfg = load_configs()
    assert cfg["actor_lr"] == cfg["critic_lr"] == cfg["alpha_lr"], "SB3: one learning rate"
    assert cfg["ent_coef"] == "auto" and cfg["target_entropy"] == "auto" and cfg["backup_entropy"]
    assert cfg["policy_delay"] == 1 and cfg["critic_subset"] == 0 and not cfg["layer_norm"]
    assert policy_cfg["activation"] == "relu" and policy_cfg["log_std_bounds"] == [-20.0, 2.0]
    assert policy_cfg["hidden_sizes"] == cfg["hidden_sizes"], "SB3: one net_arch for actor and critics"
    settings: dict[str, Any] = {
        "learning_rate": cfg["actor_lr"],
        "buffer_size": cfg["buffer_size"],
        "batch_size": cfg["batch_size"],
        "tau": cfg["tau"],
        "gamma": cfg["gamma"],
        "train_freq": 1,
        "gradient_steps": cfg["updates_per_step"],
        "ent_coef": "auto",
        "target_entropy": "auto",
        "policy_kwargs": {
            "net_arch": list(cfg["hidden_sizes"]),
            "activation_fn": torch.nn.ReLU,
            "n_critics": cfg["num_critics"],
        },
        **overrides,
    }
    return SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **settings)


def updates_sb3(data: dict[str, np.ndarray], updates: int, seed: int) -> dict[str, Any]:
    """Time ``updates`` SB3 SAC gradient steps (``model.train``) on the same transitions."""
    import gymnasium as gym
    from stable_baselines3.common.logger import Logger

    n = len(data["rewards"])
    model = sb3_sac(gym.make(ENV_ID), seed, buffer_size=n, learning_starts=0)
    model.set_logger(Logger(folder=None, output_formats=[]))  # train() records to a logger
    rb = model.replay_buffer
    assert rb is not None and rb.n_envs == 1 and not rb.optimize_memory_usage
    rb.observations[:n, 0] = data["obs"]
    rb.next_observations[:n, 0] = data["next_obs"]
    rb.actions[:n, 0] = data["actions"]  # Hopper's actions already span [-1, 1] (SB3's stored scale)
    rb.rewards[:n, 0] = data["rewards"]
    rb.dones[:n, 0] = data["terminated"] | data["truncated"]
    rb.timeouts[:n, 0] = data["truncated"] & ~data["terminated"]  # time limits bootstrap
    rb.pos, rb.full = 0, True
    model.train(gradient_steps=WARMUP_UPDATES, batch_size=BATCH_SIZE)
    start = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=BATCH_SIZE)
    seconds = time.perf_counter() - start
    values = model.logger.name_to_value
    figures = {
        "updates_per_s": updates / seconds,
        "seconds": seconds,
        "alpha": float(values.get("train/ent_coef", float("nan"))),  # mean over the timed updates
        "critic_loss": float(values.get("train/critic_loss", float("nan"))),  # SB3's half-scale loss
    }
    figures["matrix_product_ms"] = matrix_product_ms(
        lambda: model.train(gradient_steps=PROFILED_UPDATES, batch_size=BATCH_SIZE), PROFILED_UPDATES
    )
    return figures


def pendulum_omnigym(steps: int, seed: int, threads: int) -> dict[str, Any]:
    """Train omnigym SAC on Pendulum-v1 (``sac_pendulum``) and evaluate it."""
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers import build_trainer

    with tempfile.TemporaryDirectory(prefix="omnigym-bench-sac-") as run_dir:
        overrides = [
            f"seed={seed}", f"total_steps={steps}", f"algo.learning_starts={LEARNING_STARTS}",
            "algo.updates_per_step=1", "env.num_envs=1", "policy.normalize_obs=false",
            "eval.every_steps=0", f"eval.episodes={EVAL_EPISODES}", f"eval.seed={EVAL_SEED}",
            "eval.deterministic=true", "log.progress=false", "log.tensorboard=false",
            "checkpoint.every_steps=0", "runtime.device=cpu", f"runtime.torch_threads={threads}",
            f"run_dir={run_dir}",
        ]  # fmt: skip
        config = load_experiment("sac_pendulum", overrides)
        trainer = build_trainer(config, Path(run_dir))
        start = time.perf_counter()
        result = trainer.train()
        seconds = time.perf_counter() - start
    return {
        "steps": result.total_steps,
        "seconds": seconds,
        "eval_return": result.final_eval["return_mean"],
    }


def pendulum_sb3(steps: int, seed: int) -> dict[str, Any]:
    """Train SB3 SAC on Pendulum-v1 with the same schedule and evaluate it the same way."""
    from omnigym.platform.evaluate import evaluate_policy

    model = sb3_sac(PENDULUM, seed, learning_starts=LEARNING_STARTS)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)

    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        return model.predict(obs["state"], deterministic=True)[0]

    result = evaluate_policy(act, PENDULUM, episodes=EVAL_EPISODES, seed=EVAL_SEED, deterministic=True)
    seconds = time.perf_counter() - start
    return {"steps": model.num_timesteps, "seconds": seconds, "eval_return": result.summary()["return_mean"]}


def run_worker(lib: str, task: str, args: argparse.Namespace, data: Path | None = None) -> dict[str, Any]:
    """One measurement in a fresh interpreter; its JSON line."""
    cmd = [
        sys.executable, __file__, "--worker", lib, "--task", task, "--seed", str(args.seed),
        "--threads", str(args.threads), "--updates", str(args.updates), "--steps", str(args.steps),
    ]  # fmt: skip
    if data is not None:
        cmd += ["--data", str(data)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{lib} {task} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """The measurement this worker process was started for."""
    import torch

    torch.set_num_threads(args.threads)
    if args.task == "updates":
        with np.load(args.data) as archive:
            data = {k: archive[k] for k in archive.files}
        measure = updates_omnigym if args.worker == "omnigym" else updates_sb3
        result = measure(data, args.updates, args.seed)
    elif args.worker == "omnigym":
        result = pendulum_omnigym(args.steps, args.seed, args.threads)
    else:
        result = pendulum_sb3(args.steps, args.seed)
    return {**result, "torch_threads": torch.get_num_threads()}


def main() -> None:
    """Measure both libraries' updates/s and Pendulum learning; print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 transitions, 300 updates (a few minutes)")
    parser.add_argument("--transitions", type=int, help="N (default 50,000, or 5,000 with --quick)")
    parser.add_argument("--updates", type=int, help="K timed updates (default 2,000, or 300 with --quick)")
    parser.add_argument("--steps", type=int, help="Pendulum env steps (default 6,000, or 3,000 with --quick)")
    parser.add_argument("--repeats", type=int, help="updates/s repeats per library (default 3, or 1 quick)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every run (default 1)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the data, networks and training")
    parser.add_argument("--worker", choices=["omnigym", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--task", choices=["updates", "pendulum"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.transitions = args.transitions or (5_000 if args.quick else 50_000)
    args.updates = args.updates or (300 if args.quick else 2_000)
    args.steps = args.steps or (3_000 if args.quick else 6_000)
    args.repeats = args.repeats or (1 if args.quick else 3)

    if args.worker:
        print(json.dumps(worker(args)))
        return

    libs = ("omnigym", "sb3")
    ups: dict[str, list[dict[str, Any]]] = {lib: [] for lib in libs}
    with tempfile.TemporaryDirectory(prefix="omnigym-bench-sac-") as tmp:
        data = Path(tmp) / "hopper_random.npz"
        tic = time.perf_counter()
        collect(data, args.transitions, args.seed)
        seconds = time.perf_counter() - tic
        print(f"collected {args.transitions} random {ENV_ID} transitions in {seconds:.1f} s", flush=True)
        for _ in range(args.repeats):  # alternate libraries so load drift on the machine hits both alike
            for lib in libs:
                ups[lib].append(run_worker(lib, "updates", args, data))
    pendulum = {lib: run_worker(lib, "pendulum", args, None) for lib in libs}

    median = {lib: statistics.median(r["updates_per_s"] for r in ups[lib]) for lib in libs}
    ratio = median["omnigym"] / median["sb3"]
    print(f"{'library':<9} {'updates/s':>10} {'Pendulum return':>16} {'Pendulum s':>11}")
    for lib in libs:
        print(
            f"{lib:<9} {median[lib]:>10.1f} {pendulum[lib]['eval_return']:>16.1f} "
            f"{pendulum[lib]['seconds']:>11.1f}"
        )
    print(f"omnigym / SB3 updates/s = x{ratio:.2f}", flush=True)
    products = {lib: statistics.median(r["matrix_product_ms"] for r in ups[lib]) for lib in libs}
    ceiling = (1000 / median["sb3"]) / products["omnigym"]  # omnigym with nothing but its products
    print(
        f"matrix products per update: omnigym {products['omnigym']:.2f} ms, SB3 {products['sb3']:.2f} ms; "
        f"with nothing else, omnigym / SB3 would be at most x{ceiling:.2f}",
        flush=True,
    )
    figures = {
        "bench": "sac_vs_sb3",
        "quick": args.quick,
        "ratio": ratio,
        "torch_threads": args.threads,  # every worker's (each reports its own in its runs)
        "omnigym_updates_per_s": median["omnigym"],
        "sb3_updates_per_s": median["sb3"],
        "omnigym_matrix_product_ms": products["omnigym"],
        "sb3_matrix_product_ms": products["sb3"],
        "matrix_product_share": products["omnigym"] * median["omnigym"] / 1000,
        "ratio_ceiling": ceiling,
        "omnigym_pendulum_return": pendulum["omnigym"]["eval_return"],
        "sb3_pendulum_return": pendulum["sb3"]["eval_return"],
        "omnigym_pendulum_seconds": pendulum["omnigym"]["seconds"],
        "sb3_pendulum_seconds": pendulum["sb3"]["seconds"],
        "settings": {
            "env": ENV_ID,
            "transitions": args.transitions,
            "updates": args.updates,
            "warmup_updates": WARMUP_UPDATES,
            "repeats": args.repeats,
            "batch_size": BATCH_SIZE,
            "threads": args.threads,
            "seed": args.seed,
            "pendulum_steps": args.steps,
            "learning_starts": LEARNING_STARTS,
            "eval_episodes": EVAL_EPISODES,
            "eval_seed": EVAL_SEED,
        },
        "runs": {"updates": ups, "pendulum": pendulum},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
