"""Dream vs real: a policy trained only inside a learned world model vs one trained in the real env.

``--task pendulum`` (the default), per seed, on Pendulum-v1 with SAC:

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

``--task driving``: omnigym/Driving-v0 (direct control, log-replay traffic) observed through
``state``, the 4 nearest ``agents`` and 10 ``route`` points (78 values), per seed:

1. Real: ``ppo_driving`` (PPO, 32 envs x 128 steps per iteration) on those keys for ``S`` real
   steps on the training scenes, checkpoints every ``S / 4``.
2. Dream: ``S`` real steps (the same real-data budget) of a scripted behaviour driver (pure
   pursuit on the route at a per-episode share of the speed limit, with per-episode levels of
   correlated action noise; it ignores other agents), stored as a Minari dataset (5 episodes
   held out for the k-step errors); the MBPO ensemble fitted with early stopping on it (learned
   reward and termination heads, the rare failures weighted 20 times in the termination loss
   and a row ended at probability 0.8; deterministic steps clipped to the data's range); then the
   same PPO experiment (``trainer=model_based``) for ``S`` steps in the model only: the same
   number of PPO iterations and gradient steps. Model episodes start from live resets of the
   real training scenes and last the scenes' 160 steps; MOPO's penalty (0.3 x the members'
   disagreement) is subtracted from the reward and episodes are truncated where the
   disagreement exceeds 2.0.
3. Both final policies (their mode), a uniform random policy (sampling) and
   ``constant_velocity`` run on the same held-out test scenes and seeds; reported: return and
   PDMS. Score: ``(dream - random) / (real - random)`` on the return (and on PDMS, and with
   ``constant_velocity`` as the baseline).
4. Fidelity of the seed-1 model: k-step errors on its held-out real episodes; Spearman of the
   model vs real returns (learned reward, test scenes) of the real run's 4 checkpoints,
   ``constant_velocity`` and random.

No throughput part (``ratio`` is the return score). S = 65,536 (16 PPO iterations, 640
gradient steps), 200 training scenes, at most 30 fitting epochs. Full: seeds 1-3, 50 test
scenes. ``--quick``: seed 1, 24 test scenes.

Usage: ``omnigym bench dream_vs_real [--quick] [--task pendulum|driving] [--seeds ...] [--out DIR]``
(or ``python bench/dream_vs_real.py ...``); driving's termination settings for ablations:
``--termination-pos-weight W --termination-threshold T`` (1 and 0.5: the unweighted head).
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

DURATIONS = {"quick": "164 s (driving: 662 s)", "full": "678 s (driving: 2,256 s)"}
"""Measured on 2 shared CPU cores, one thread: the "wall time" figures of docs/world_models.md."""

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
    from omnigym.core.policy import Policy
    from omnigym.platform.cli import resolve_policy
    from omnigym.platform.trainers.model_based import RankedPolicy, rank_policies
    from omnigym.platform.vec_env import WorldModelEnvConfig

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
    """The chosen task's bench (module docstring). The last line is JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--task", choices=("pendulum", "driving"), default="pendulum", help="default pendulum"
    )
    parser.add_argument(
        "--quick", action="store_true", help="seed 1 only (pendulum: 3,000 steps; driving: 24 test scenes)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 1 2 3; quick: 1)")
    parser.add_argument("--out", default=None, help="keep the runs and models here (default: a temp dir)")
    parser.add_argument(
        "--steps", type=int, default=None, help="driving: override S (a multiple of 16,384; smoke tests)"
    )
    parser.add_argument(
        "--termination-pos-weight", type=float, default=TERMINATION_POS_WEIGHT,
        help=f"driving: the ensemble's termination_pos_weight (default {TERMINATION_POS_WEIGHT}; 1: none)",
    )  # fmt: skip
    parser.add_argument(
        "--termination-threshold", type=float, default=TERMINATION_THRESHOLD,
        help=f"driving: the ensemble's termination_threshold (default {TERMINATION_THRESHOLD})",
    )  # fmt: skip
    args = parser.parse_args()
    if args.task == "driving":
        driving(args)
    else:
        pendulum(args)


def pendulum(args: argparse.Namespace) -> None:
    """Real SAC, dream SAC, random; fidelity of the model; throughput. The last line is JSON."""
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
        "torch_threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


# --- driving ------------------------------------------------------------------------------------
DRIVING_ID = "omnigym/Driving-v0"
DRIVING_OBS_KEYS = ["state", "agents", "route"]
DRIVING_OBS = {"obs_keys": DRIVING_OBS_KEYS, "num_agents_obs": 4, "num_route_points": 10}
"""The modelled observation: ego state (12), 4 nearest agents (4 x 9), 10 route points (10 x 3)."""
DRIVING_HORIZON = 160
"""Steps of a driving scene (16 s at 0.1 s): the model episodes' horizon."""
MOPO_PENALTY = 0.3
"""MOPO's lambda on the members' disagreement (``ensemble_std``, raw units): reward - 0.3 * std."""
MAX_UNCERTAINTY = 2.0
"""Model episodes are truncated where the disagreement exceeds this (about the data's 99th percentile)."""
TERMINATION_POS_WEIGHT = 20.0
"""Weight of the failures (0.8 % of the behaviour data's transitions) in the termination loss: with
weight 1 a 10-epoch fit on seed 2's data ended none of the held-out failures at any threshold
down to 0.2 (probability 0.018 on them against 0.007 elsewhere), with 20 it told them apart."""
TERMINATION_THRESHOLD = 0.8
"""With weight 20, ends rows whose failure probability exceeds about 0.17 (held out on that fit:
recall 0.27-0.13 of the failures at a false rate of 0.8-0.2 % of the other steps for 0.7-0.9)."""
PPO_BATCH = 32 * 128
"""Env steps per PPO iteration in ``ppo_driving`` (32 envs x 128 steps)."""
PPO_GRADIENT_STEPS = 5 * 8
"""Gradient steps per PPO iteration (5 epochs x 8 minibatches)."""


def driving_overrides(steps: int, train_scenes: int, test_scenes: int, seed: int) -> list[str]:
    """``ppo_driving`` on :data:`DRIVING_OBS`, ``steps`` env steps, evaluated on the test scenes."""
    return [
        f"seed={seed}", f"total_steps={steps}", "log.progress=false", "log.tensorboard=false",
        f"env.kwargs.num_scenes={train_scenes}", f"env.kwargs.obs_keys=[{','.join(DRIVING_OBS_KEYS)}]",
        f"env.kwargs.num_agents_obs={DRIVING_OBS['num_agents_obs']}",
        f"env.kwargs.num_route_points={DRIVING_OBS['num_route_points']}",
        f"policy.obs_keys=[{','.join(DRIVING_OBS_KEYS)}]",
        f"eval.every_steps={steps}", f"eval.episodes={test_scenes}", f"eval.seed={EVAL_SEED}",
        f"eval.env_kwargs={{split: test, num_scenes: {test_scenes}}}",
    ]  # fmt: skip


def dream_overrides(
    dataset_id: str,
    max_epochs: int,
    pos_weight: float = TERMINATION_POS_WEIGHT,
    threshold: float = TERMINATION_THRESHOLD,
) -> list[str]:
    """``trainer=model_based`` on a collected dataset: the ensemble, learned reward and termination.

    The model is kept honest four ways: deterministic steps, observations and rewards clipped to
    the data's range, MOPO's penalty with truncation on the members' disagreement, and a
    termination head that weighs the rare failures ``pos_weight`` times (ending rows at
    ``threshold``). Without the penalty, PPO learned to steer off the road at once (real return 5,
    below random: the model had too few failures to predict them); without the clip, model
    returns reached -4e6 off the data.
    """
    return [
        "trainer=model_based", "model_based.model.type=ensemble", f"model_based.dataset={dataset_id}",
        f"model_based.max_epochs={max_epochs}", "model_based.fidelity_episodes=5",
        "model_based.model.deterministic=true", "model_based.model.clip_to_data=true",
        "model_based.model.uncertainty=ensemble_std", f"env.world_model.uncertainty_penalty={MOPO_PENALTY}",
        f"model_based.model.termination_pos_weight={pos_weight}",
        f"model_based.model.termination_threshold={threshold}",
        f"env.world_model.max_uncertainty={MAX_UNCERTAINTY}",
        "env.world_model.start_states=live", f"env.world_model.horizon={DRIVING_HORIZON}",
        "env.world_model.reward=learned", "env.world_model.termination=learned",
    ]  # fmt: skip


def behaviour_policy(observation_space: Any, action_space: Any) -> Any:
    """The scripted data-collection driver (:func:`_cruise` plus per-episode noise), as a Policy."""
    from dataclasses import dataclass

    import torch

    from omnigym.core.policy import Policy, PolicyConfig
    from omnigym.core.types import PolicyStep

    @dataclass
    class NoisyCruiseConfig(PolicyConfig):
        type: str = "noisy_cruise"

    class NoisyCruise(Policy):
        """Pure pursuit on the route at ``factor`` x the speed limit plus correlated (AR(1)) noise.

        Each episode draws its speed share ``factor ~ U(0.4, 1.1)`` and its noise level (0.2, 0.6
        or 1.5 x [2 m/s^2, 0.5 rad/s]), so the data holds careful and erratic driving, leaving
        the road and (the driver ignores other agents) collisions. ``deterministic``: no noise.
        """

        name = "noisy_cruise"
        config_class = NoisyCruiseConfig

        def __init__(self) -> None:
            super().__init__(NoisyCruiseConfig(), observation_space, action_space)
            self.low = torch.as_tensor(action_space.low)
            self.high = torch.as_tensor(action_space.high)
            self.noise = self.level = self.factor = torch.zeros(0)

        def reset(self, done_mask: Any = None) -> None:
            self.noise = torch.zeros(0)  # redrawn at the next act, under the episode's seed

        def act(self, obs: Any, *, deterministic: bool = False) -> PolicyStep:
            state, route = obs["state"].float(), obs["route"].float()
            rows = state.shape[0]
            if self.noise.shape[0] != rows:
                self.noise = torch.zeros(rows, 2)
                self.level = torch.tensor([0.2, 0.6, 1.5])[torch.randint(3, (rows, 1))]
                self.factor = 0.4 + 0.7 * torch.rand(rows)
            action = _cruise(state, route, self.factor)
            if not deterministic:
                self.noise = 0.9 * self.noise + 0.44 * torch.randn(rows, 2)  # unit stationary std
                action = action + self.level * torch.tensor([2.0, 0.5]) * self.noise
            action = torch.clamp(action, self.low, self.high)
            return PolicyStep(action, torch.zeros(rows, 1), torch.ones(rows, 1, dtype=torch.bool))

    return NoisyCruise()


def _cruise(state: Any, route: Any, factor: Any) -> Any:
    """Control actions ``[B, 2]`` of a pure-pursuit route follower at ``factor [B]`` x the limit.

    ``state [B, 12]``: speed, ..., wheel angle at 2, limit at 6; ``route [B, P, 3]``: x, y, valid.
    Steers toward the route point ``max(5 m, 0.8 s x speed)`` ahead (wheel base 3.09 m).
    """
    import torch

    speed, wheel, limit = state[:, 0], state[:, 2], state[:, 6]
    xy = route[..., :2]
    steps = torch.diff(torch.cat([torch.zeros_like(xy[:, :1]), xy], dim=1), dim=1)
    arc = torch.cumsum(steps.norm(dim=-1), dim=1)
    lookahead = torch.clamp(0.8 * speed, min=5.0)
    index = (arc < lookahead[:, None]).sum(dim=1).clamp(max=arc.shape[1] - 1)
    goal = xy[torch.arange(len(speed)), index]
    curvature = 2 * goal[:, 1] / goal.square().sum(dim=1).clamp(min=1.0)
    steer_rate = (torch.atan(curvature * 3.09) - wheel) / 0.2
    return torch.stack([factor * limit - speed, steer_rate], dim=1)


def driving_baselines(test_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The random (sampling) and ``constant_velocity`` policies for the driving env's spaces."""
    from omnigym.platform.cli import resolve_policy

    return {
        name: resolve_policy(name, DRIVING_ID, env_kwargs=test_kwargs)
        for name in ("random", "constant_velocity")
    }


def driving_eval(
    policy: Any, test_kwargs: dict[str, Any], episodes: int, deterministic: bool
) -> dict[str, float]:
    """Mean return and PDMS of ``policy`` on the test scenes (episode ``i``: seed ``EVAL_SEED + i``)."""
    import torch

    from omnigym.platform.evaluate import evaluate_policy

    torch.manual_seed(EVAL_SEED)  # the random policy's draws
    summary = evaluate_policy(
        policy, DRIVING_ID, episodes=episodes, seed=EVAL_SEED, deterministic=deterministic,
        env_kwargs=test_kwargs,
    ).summary()  # fmt: skip
    return {"return": float(summary["return_mean"]), "pdms": float(summary["pdms_mean"])}


def train_driving(run_dir: Path, overrides: list[str]) -> dict[str, float]:
    """Train ``ppo_driving`` with ``overrides``: its final real test-scene return and PDMS."""
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers import build_trainer

    config = load_experiment("ppo_driving", [*overrides, f"run_dir={run_dir}"])
    trainer = build_trainer(config, run_dir)
    final = trainer.train().final_eval
    return {"return": float(final["return_mean"]), "pdms": float(final["pdms_mean"])}


def relative(dream: float, real: float, base: float) -> float:
    """``(dream - base) / (real - base)``: 1 = as good as real-trained, 0 = the baseline."""
    return (dream - base) / (real - base) if real != base else float("nan")


def driving(args: argparse.Namespace) -> None:
    """Real PPO vs PPO trained only in the ensemble on Driving-v0; fidelity. The last line is JSON."""
    import torch

    from omnigym.core.policy import Policy
    from omnigym.platform.cli import resolve_policy
    from omnigym.platform.trainers.model_based import RankedPolicy, collect_real_data, rank_policies
    from omnigym.platform.vec_env import WorldModelEnvConfig
    from omnigym.world_models.fidelity import DreamVsReal, FidelityReport

    torch.set_num_threads(1)
    steps = args.steps or 65_536
    if steps % (4 * PPO_BATCH):
        raise SystemExit(f"--steps must be a multiple of {4 * PPO_BATCH} (4 checkpoints of whole iterations)")
    seeds = args.seeds or ([1] if args.quick else [1, 2, 3])
    train_scenes, test_scenes, max_epochs = (200, 24 if args.quick else 50, 30)
    rank_episodes = test_scenes
    train_kwargs = {"split": "train", "num_scenes": train_scenes, **DRIVING_OBS}
    test_kwargs = {"split": "test", "num_scenes": test_scenes, **DRIVING_OBS}
    iterations = steps // PPO_BATCH
    termination = (args.termination_pos_weight, args.termination_threshold)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
        baselines = driving_baselines(test_kwargs)
        base = {
            name: driving_eval(policy, test_kwargs, test_scenes, deterministic=name != "random")
            for name, policy in baselines.items()
        }
        print(f"baselines on {test_scenes} test scenes: {json.dumps(base)}", flush=True)
        runs: dict[str, dict[str, Any]] = {}
        for seed in seeds:
            common = driving_overrides(steps, train_scenes, test_scenes, seed)
            t0 = time.perf_counter()
            real = train_driving(
                root / f"real_{seed}", [*common, f"checkpoint.every_steps={steps // 4}", "checkpoint.keep=8"]
            )
            t1 = time.perf_counter()
            dataset_id = f"omnigym-wm/driving-behaviour-s{seed}-v0"
            probe = resolve_policy("random", DRIVING_ID, env_kwargs=train_kwargs)
            behaviour = behaviour_policy(probe.observation_space, probe.action_space)
            data = collect_real_data(
                DRIVING_ID, steps, dataset_id, policy=behaviour, seed=seed, env_kwargs=train_kwargs
            )
            t2 = time.perf_counter()
            dream = train_driving(
                root / f"dream_{seed}",
                [*common, *dream_overrides(dataset_id, max_epochs, *termination)],
            )
            t3 = time.perf_counter()
            runs[str(seed)] = {
                "real": real, "dream": dream, "real_data_steps": len(data),
                "score_return": relative(dream["return"], real["return"], base["random"]["return"]),
                "score_pdms": relative(dream["pdms"], real["pdms"], base["random"]["pdms"]),
                "seconds": {"real": round(t1 - t0, 1), "collect": round(t2 - t1, 1),
                            "dream": round(t3 - t2, 1)},
            }  # fmt: skip
            print(f"seed {seed}: {json.dumps(runs[str(seed)])}", flush=True)
        mean = {
            who: {m: float(np.mean([r[who][m] for r in runs.values()])) for m in ("return", "pdms")}
            for who in ("real", "dream")
        }
        scores = {
            f"{metric}_vs_{name}": relative(mean["dream"][metric], mean["real"][metric], base[name][metric])
            for metric in ("return", "pdms") for name in ("random", "constant_velocity")
        }  # fmt: skip
        summary = DreamVsReal(
            mean["dream"]["return"], mean["real"]["return"], base["random"]["return"],
            iterations * PPO_GRADIENT_STEPS,
        )  # fmt: skip
        model_dir = root / f"dream_{seeds[0]}" / "world_model"
        real_run = root / f"real_{seeds[0]}"
        ranked = [
            RankedPolicy(f"ppo@{int(d.name.split('_')[1])}", Policy.from_pretrained(d / "policy"))
            for d in sorted((real_run / "checkpoints").glob("step_*"))
        ]
        ranked.append(RankedPolicy("constant_velocity", baselines["constant_velocity"]))
        ranked.append(RankedPolicy("random", baselines["random"], deterministic=False))
        env_config = WorldModelEnvConfig(horizon=DRIVING_HORIZON)
        rows, rho = rank_policies(
            ranked, model_dir, DRIVING_ID, episodes=rank_episodes, seed=EVAL_SEED, env_config=env_config,
            env_kwargs=test_kwargs,
        )  # fmt: skip
        report = FidelityReport.load(model_dir)
        assert report is not None
        trained = [p for p in report.policies if p.name == "trained"]  # the dream policy, from the run
        report.policies = [*rows, *trained]
        report.rank_correlation, report.dream_vs_real = rho, summary
        report.write(model_dir)
    print()
    print(report.to_markdown())
    print(f"Baselines (test scenes): {json.dumps(base)}")
    print(f"Per seed: {json.dumps(runs)}")
    print(f"Scores (dream - baseline) / (real - baseline): {json.dumps(scores)}")
    print(json.dumps({
        "bench": "dream_vs_real", "task": "driving", "ratio": scores["return_vs_random"],
        "dream": mean["dream"], "real": mean["real"], "baselines": base, "scores": scores,
        "target_score": 0.8, "ppo_iterations": iterations, "updates": iterations * PPO_GRADIENT_STEPS,
        "real_steps": steps, "runs": runs, "spearman": rho, "ranking": [vars(r) for r in rows],
        "dream_model_vs_real": [vars(p) for p in trained],
        "k_step": [vars(r) for r in report.k_step], "fit": report.fit, "seeds": seeds, "quick": args.quick,
        "train_scenes": train_scenes, "test_scenes": test_scenes,
        "termination_pos_weight": termination[0], "termination_threshold": termination[1],
        "torch_threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
