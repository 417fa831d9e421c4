"""Flow-GRPO fine-tuning of a behaviour-cloned flow policy on PushCube (state observations).

1. Demonstrations: ``pushcube_expert`` on ``omnigym/PushCube-v0`` (state), made imperfect on
   purpose so that behaviour cloning leaves room for RL: only ``DEMO_EPISODES`` episodes (283
   steps), acted with Gaussian action noise of std ``DEMO_NOISE`` (the expert's own
   ``noise_std``; all 20 still succeed), failures would be kept. (With noise 0.3 and 30 episodes,
   of which 60 % succeed, the clone solved 2 % of the test episodes: too little for RL to start
   from; 50 episodes at noise 0.1 gave 42 %.) They are written as a
   Minari dataset with :func:`~omnigym.platform.datasets.collect_dataset` (in a temporary
   ``$MINARI_DATASETS_PATH``).
2. Behaviour cloning with :func:`~omnigym.platform.trainers.imitation.imitate_dataset` of ``flow``
   (conditional flow matching, 10 Euler steps) with a small U-Net and short chunks (``POLICY``).
3. Fine-tuning a copy of it (its EMA weights) with ``rl_chain: true`` (Flow-GRPO: an Euler step
   becomes an SDE step, a part with its Gaussian log-probability) by omnigym's ``grpo``
   (critic-free: group-relative advantages of the episode's reward, clipped ratio per part)
   on :class:`~omnigym.platform.groups.GroupCollector` groups of ``GROUP_SIZE`` episodes from one
   start state, start seeds disjoint from the demonstrations' and the test episodes'. As DPPO
   does, only the last ``FT_DENOISING_STEPS`` of the 10 steps are stochastic, fine-tuned parts
   (scored on the executed actions only); the first steps run a frozen copy of the BC weights
   (``freeze_chain_prefix``). The episode reward is its success plus potential-based shaping on
   the cube-goal distance (``PROGRESS_SHAPING``).
4. Evaluation on the same held-out test episodes (seeds ``EVAL_SEED``...) before and after:
   success rate with deterministic acting (the ODE from the policy's fixed noise, the headline)
   and with sampled acting (the SDE sampler the RL trains); the expert's (noise-free and with the
   demonstrations' noise) and a random policy's success on the same episodes.

Each seed repeats steps 2-4 (BC initialisation and window order, RL sampling and start states).
Last line: one JSON object; ``ratio`` = deterministic success after fine-tuning / before, the
mean over seeds of the per-seed ratios, with every figure, among them the mean paired gain over
the seeds and its standard error (``gain``, ``gain_se``).

Fine-tuning settings: with success alone as the reward, only about 3 of the 8 groups of a batch
held both successes and failures, and every setting tried (all 10 steps or the last 3 as parts,
lr 1e-5 to 3e-4, clip 0.2 or 0.01) left the deterministic success unchanged or lowered it: the
gradient is mostly noise, and Adam moves every weight by about the learning rate whatever its
signal. The shaping makes every group informative (distances always differ) and is aligned with
success; docs/policies.md has the figures of every variant.

Usage: ``omnigym bench pushcube_rl_finetune [--quick] [--method ppo|grpo|steering] [--seeds N ...]
[--jobs N]`` (full: seeds 0 to 6, 2,000 BC steps per seed, 200 test episodes, the seeds spread over
``--jobs`` processes of one thread each, by default 2; quick: seed 0, 12 updates, 50 test
episodes, one process). A full ``ppo`` seed takes about 26 min of one core (BC 2-7 min, 200
updates about 22 min, evaluations), so a full run about 1 h 50 min on a 2-core CPU;
docs/policies.md has the measured figures.

``--method ppo`` (the default) trains the chain by PPO with a critic (DPPO proper: GAE over the env
steps, the critic on the clone's observation features at its own learning rate); ``--method grpo``
trains it by GRPO on groups of episodes from one start state (Flow-GRPO, 60 updates of 128
episodes in a full run); ``--method steering`` keeps the clone frozen and trains a Gaussian policy
over its initial noise by PPO (DSRL, ``noise_steering``). ``ppo`` and ``steering`` collect 64 envs x
40 steps per update, 200 updates in a full run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

DURATIONS = {"quick": "about 4 min (beside two training jobs)", "full": "about 1 h 50 min (--jobs 2)"}
"""On a 2-core CPU: docs/policies.md, "PPO with a critic" (7 seeds at about 25 min each, two at a time);
quick timed 2026-12-03 beside two training jobs."""

ENV_ID = "omnigym/PushCube-v0"
ENV_KWARGS: dict[str, Any] = {"obs_keys": ["state"], "reward_type": "sparse"}
"""Sparse reward (1 on the successful, last step): an episode's return is its success. With the
dense staged reward (40-step episodes, 4 groups, lr 3e-4) GRPO raised the mean return from -31.8
to -26.9 in 30 updates while test success fell from 0.32 to 0.12, so the fine-tuning optimises
success itself."""
DATASET_ID = "omnigym/pushcube-noisy-expert-v0"
DEMO_EPISODES = 20
DEMO_NOISE = 0.1
"""Std of the Gaussian noise on the expert's [-1, 1] actions in the demonstrations."""
EVAL_SEED = 10_000
"""First test episode's seed (the demonstrations use seeds 0, 1, ...)."""
RL_SEED = 1_000_000
"""First RL start-state seed (seed s of the bench uses RL_SEED + 100,000 s, ...)."""
POLICY = [
    "obs_keys=[state]", "n_obs_steps=2", "horizon=8", "n_action_steps=4", "down_dims=[64,128]",
    "state_hidden_sizes=[128,128]", "time_embed_dim=64", "num_inference_steps=10",
]  # fmt: skip
"""Flow policy overrides: 1.4 M parameters (encoder and U-Net), chunks of 8 with 4 executed
(PushCube's expert needs about 11 steps)."""
BC_LEARNING_RATE = 1e-3
BC_STEPS = 2000
"""AdamW steps of 64 windows (100-140 s on one shared CPU core)."""
GROUP_SIZE = 8
QUICK_GROUPS, FULL_GROUPS = 8, 16
"""Groups per GRPO batch (``groups * GROUP_SIZE`` envs). The full run's 128 episodes per batch
halve the gradient's noise variance of the 64 the bench used first (docs/policies.md)."""
RL_MAX_STEPS = 40
"""Longest fine-tuning episode (the test episodes keep the env's 100-step limit; the noisy expert
needs about 14 steps)."""
GRPO_SETTINGS: dict[str, Any] = {
    "learning_rate": 3e-5, "anneal_lr": True, "num_epochs": 2, "clip_low": 0.2, "clip_high": 0.2,
}  # fmt: skip
"""Shared GRPO settings; a batch is split into minibatches of 4 groups (32 episodes). The learning
rate decays linearly to 0 over the run: at a constant 2e-5 a seed-0 run rose from 0.35 to 0.49
deterministic success in 40 updates and fell back to 0.35 by 50 (docs/policies.md)."""
EPISODES_PER_MINIBATCH = 32
SDE_NOISE_LEVEL = 0.7
"""Flow-GRPO's noise level a (the reference value)."""
FT_DENOISING_STEPS = 3
"""Fine-tuned (stochastic) last SDE steps (t = 0.3, 0.2, 0.1) of the 10; the first 7 run the
frozen BC weights (DPPO fine-tunes the last 10 of 20 DDPM steps)."""
LOGPROB_SLICE = "executed"
"""Score the 4 executed actions of a chunk (DPPO): the noise on the others cannot change the
reward, so their log-probabilities would only add variance."""
PROGRESS_SHAPING = 5.0
"""Coefficient c (1/m) of the potential-based shaping ``c (d_t - d_{t+1})`` (Ng et al., 1999; Φ =
-c d with d the cube-goal distance). An episode's return becomes its success plus c times the
distance its cube gained towards the goal, so the groups whose episodes all failed (or all
succeeded) still rank their episodes; 5 makes 20 cm of progress worth one success."""
FULL_SEEDS = (0, 1, 2, 3, 4, 5, 6)
"""Seeds of a full run: with 200 test episodes one seed's gain has a std of about 0.045, so a
gain of 0.1 is clear only over several seeds (docs/policies.md)."""
QUICK_UPDATES, FULL_UPDATES = 12, 60
"""RL updates per seed of a quick run (every method) and of a full ``grpo`` run (one batch of
``groups * GROUP_SIZE`` episodes each); full ``ppo`` and ``steering`` runs make
``PPO_FULL_UPDATES``."""
METHODS = ("ppo", "grpo", "steering")
"""``ppo`` (the default, the largest gains): the SDE chain (above) trained by PPO with a critic and
GAE (DPPO proper). ``grpo``: Flow-GRPO over the same chain. ``steering``: DSRL, PPO over the
initial noise of the frozen clone (``noise_steering``)."""
PPO_ENVS, PPO_STEPS = 64, 40
"""PPO rollouts: 64 envs x 40 steps (2,560 steps, about the GRPO batch's) per update."""
PPO_FULL_UPDATES = 200
"""Full-run updates of ``ppo`` and ``steering`` (an update costs 4-6 s against GRPO's 14)."""
PPO_SETTINGS: dict[str, Any] = {
    "learning_rate": 3e-5, "critic_learning_rate": 1e-3, "anneal_lr": True, "num_epochs": 2,
    "num_minibatches": 4, "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.2,
    "critic_hidden_sizes": (256, 256),
}  # fmt: skip
"""PPO on the chain: the GRPO settings for the actor, a critic on the clone's observation features at
its own rate 1e-3 (DPPO's), which learns alone for the first ``CRITIC_WARMUP`` updates."""
CRITIC_WARMUP = 5
STEERING_SETTINGS: dict[str, Any] = {
    "learning_rate": 1e-3, "anneal_lr": True, "num_epochs": 10, "num_minibatches": 4, "gamma": 0.99,
    "gae_lambda": 0.95, "clip_coef": 0.2, "critic_hidden_sizes": (256, 256),
}  # fmt: skip
"""PPO over the noise (a small Gaussian MLP policy: CleanRL's continuous-control settings, but lr
1e-3: at 3e-4, 60 updates left the success of both seeds where it was, docs/policies.md)."""


def expert_policy(noise_std: float = 0.0) -> Any:
    """The scripted expert, as registered, with Gaussian action noise ``noise_std`` when sampling."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.vec_env import make_env

    cls = POLICIES.get("pushcube_expert")
    env = make_env(ENV_ID, **ENV_KWARGS)
    policy = cls(cls.config_class(noise_std=noise_std), env.observation_space, env.action_space)
    env.close()
    return policy


def random_policy() -> Any:
    """Uniform random actions."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.vec_env import make_env

    cls = POLICIES.get("random")
    env = make_env(ENV_ID, **ENV_KWARGS)
    policy = cls(cls.config_class(), env.observation_space, env.action_space)
    env.close()
    return policy


def demonstrations(episodes: int) -> Any:
    """The noisy expert's episodes (seeds 0..episodes-1, failures kept) collected to ``DATASET_ID``."""
    from omnigym.platform.datasets import PolicySource, collect_dataset

    source = PolicySource(expert_policy(DEMO_NOISE), deterministic=False, label="pushcube_expert:noisy")
    return collect_dataset([source], ENV_ID, DATASET_ID, episodes=episodes, seed=0, env_kwargs=ENV_KWARGS)


def evaluate(policy: Any, episodes: int, deterministic: bool = True, seed: int = 0) -> dict[str, float]:
    """Success rate and mean length of the test episodes (seeds ``EVAL_SEED``...)."""
    from omnigym.platform.evaluate import evaluate_policy

    torch.manual_seed(seed)  # sampled acting: the same draws for the same weights
    summary = evaluate_policy(
        policy, ENV_ID, episodes=episodes, seed=EVAL_SEED, deterministic=deterministic,
        num_envs=min(episodes, 25), env_kwargs=ENV_KWARGS,
    ).summary()  # fmt: skip
    return {"success": round(summary.get("success_rate", 0.0), 4), "length": round(summary["length_mean"], 1)}


def behaviour_cloning(steps: int, seed: int) -> tuple[Any, float]:
    """``flow`` cloned from the demonstrations; the policy and the training time (s)."""
    from omnigym.platform.trainers.imitation import ImitationConfig, imitate_dataset

    config = ImitationConfig(
        steps=steps, batch_size=64, learning_rate=BC_LEARNING_RATE, warmup_steps=100, log_every=0, seed=seed
    )
    tic = time.perf_counter()
    policy, _ = imitate_dataset(DATASET_ID, "flow", list(POLICY), config)
    return policy, time.perf_counter() - tic


def rl_copy(bc: Any) -> Any:
    """A copy of ``bc`` with ``rl_chain`` on, acting with (and training) its EMA weights."""
    from dataclasses import replace

    from omnigym.policies.flow.policy import FlowPolicy

    config = replace(
        bc.config, rl_chain=True, sde_noise_level=SDE_NOISE_LEVEL, ft_denoising_steps=FT_DENOISING_STEPS,
        logprob_slice=LOGPROB_SLICE,
    )  # fmt: skip
    policy = FlowPolicy(config, bc.observation_space, bc.action_space)
    policy.load_state_dict(bc.state_dict())
    policy.use_ema_weights()
    policy.freeze_chain_prefix()  # the first, deterministic steps keep the BC weights
    return policy


def cube_goal_distance(state: torch.Tensor) -> torch.Tensor:
    """PushCube's cube-goal distance (m) from ``state [..., D]``.

    The env's layout: the goal is the gripper block's last 3 values, then the cube's position.
    """
    from omnigym.envs.manipulation.cube import CUBE_POS
    from omnigym.envs.manipulation.tabletop import GRIPPER_STATE_DIM

    goal = slice(GRIPPER_STATE_DIM - 3, GRIPPER_STATE_DIM)
    return (state[..., CUBE_POS] - state[..., goal]).norm(dim=-1)


def add_progress_shaping(rollout: Any, coef: float) -> None:
    """Add ``coef (d_t - d_{t+1})`` to the rewards of a group rollout ``[T, N]`` in place.

    ``d_t`` is the cube-goal distance in the observation step t acted on; only steps whose next
    step is valid (same episode) get a term, so an episode's return grows by ``coef (d_0 - d_last)``
    with ``d_last`` its last observed distance. Potential-based (Φ = -coef d), so it does not
    change which policies are optimal (Ng et al., 1999).
    """
    distance = cube_goal_distance(rollout.obs["state"].float())
    same_episode = rollout.valid[:-1] & rollout.valid[1:]
    rollout.rewards[:-1] += coef * (distance[:-1] - distance[1:]) * same_episode


def training_figures(
    policy: Any, tic: float, updates: int, episodes: int, env_steps: int, curve: list[float]
) -> dict[str, Any]:
    """Put ``policy`` back to acting and summarise a fine-tuning run (``curve``: success per batch)."""
    policy.eval()
    policy.reset()
    return {
        "rl_s": round(time.perf_counter() - tic, 1), "updates": updates, "episodes": episodes,
        "env_steps": env_steps, "train_success_first10": round(statistics.mean(curve[:10]), 4),
        "train_success_last10": round(statistics.mean(curve[-10:]), 4),
    }  # fmt: skip


def add_progress_shaping_continuing(rollout: Any, coef: float) -> None:
    """:func:`add_progress_shaping` for a continuing rollout ``[T, N]`` (auto-reset envs).

    Step t's next observation is step t + 1's, or ``next_obs`` after the last step; steps that end
    an episode get no term (their next stored observation is the next episode's first).
    """
    distance = cube_goal_distance(rollout.obs["state"].float())
    last = cube_goal_distance(rollout.next_obs["state"].float()).unsqueeze(0)
    following = torch.cat([distance[1:], last])
    rollout.rewards += coef * (distance - following) * (rollout.valid & ~rollout.dones)


def steering_policy(bc: Any, folder: Path) -> Any:
    """``noise_steering`` over ``bc`` (saved to ``folder`` and loaded from there, as a user would)."""
    from omnigym.policies.chunking.steered import NoiseSteeringConfig, NoiseSteeringPolicy

    bc.save_pretrained(folder)
    return NoiseSteeringPolicy(
        NoiseSteeringConfig(base_path=str(folder)), bc.observation_space, bc.action_space
    )


def fine_tune_ppo(policy: Any, updates: int, seed: int, steering: bool, log: bool = True) -> dict[str, Any]:
    """``updates`` PPO updates of ``policy`` (the chain, or a steering policy) in place; training figures."""
    from omnigym.platform.algorithms.ppo import PPO
    from omnigym.platform.collect import RolloutCollector
    from omnigym.platform.vec_env import EnvConfig, make_vec_env

    torch.manual_seed(seed)
    envs = make_vec_env(EnvConfig(
        id=ENV_ID, num_envs=PPO_ENVS, vectorization="sync", kwargs=ENV_KWARGS, max_episode_steps=RL_MAX_STEPS
    ))  # fmt: skip
    settings = STEERING_SETTINGS if steering else PPO_SETTINGS
    algorithm = PPO(
        PPO.config_class(num_steps=PPO_STEPS, **settings), policy, envs.observation_space, envs.action_space
    )
    collector = RolloutCollector(envs, policy, PPO_STEPS)
    collector.reset(seed=[RL_SEED + 100_000 * seed + i for i in range(PPO_ENVS)])
    warmup = 0 if steering else CRITIC_WARMUP
    curve: list[float] = []
    env_steps = episodes = 0
    tic = time.perf_counter()
    for update in range(1, updates + 1):
        policy.train()
        rollout, _ = collector.collect()
        env_steps += int(rollout.valid.sum())
        ended = int(rollout.dones.sum())
        episodes += ended
        curve.append(float((rollout.rewards > 0.5).sum()) / max(ended, 1))  # sparse: 1 on success
        add_progress_shaping_continuing(rollout, PROGRESS_SHAPING)
        if update <= warmup:  # the critic alone learns the BC policy's values first
            algorithm.optimizer.param_groups[0]["lr"] = 0.0
        else:
            algorithm.set_progress((update - 1 - warmup) / max(updates - warmup, 1))
        metrics = algorithm.update(algorithm.process_rollout(rollout))
        if log and update % 10 == 0:
            print(
                f"  seed {seed} update {update}: training success (last 10 batches) "
                f"{statistics.mean(curve[-10:]):.2f}, "
                f"explained variance {metrics['train/explained_variance']:.2f}, approx_kl "
                f"{metrics['train/approx_kl']:.4f}, clipfrac {metrics['train/clipfrac']:.3f} "
                f"({time.perf_counter() - tic:.0f} s)",
                flush=True,
            )
    envs.close()
    return training_figures(policy, tic, updates, episodes, env_steps, curve)


def fine_tune(policy: Any, updates: int, seed: int, groups: int, log: bool = True) -> dict[str, Any]:
    """``updates`` GRPO updates on the SDE chain of ``policy`` (in place); training figures."""
    from omnigym.platform.algorithms.grpo import GRPO
    from omnigym.platform.groups import GroupCollector
    from omnigym.platform.vec_env import EnvConfig, make_vec_env

    torch.manual_seed(seed)
    envs = make_vec_env(
        EnvConfig(id=ENV_ID, num_envs=groups * GROUP_SIZE, vectorization="sync", kwargs=ENV_KWARGS)
    )
    config = GRPO.config_class(
        group_size=GROUP_SIZE, max_episode_steps=RL_MAX_STEPS,
        num_minibatches=max(1, groups * GROUP_SIZE // EPISODES_PER_MINIBATCH), **GRPO_SETTINGS,
    )  # fmt: skip
    algorithm = GRPO(config, policy, envs.observation_space, envs.action_space)
    collector = GroupCollector(envs, policy, GROUP_SIZE, RL_MAX_STEPS, seed=RL_SEED + 100_000 * seed)
    curve: list[float] = []
    env_steps = 0
    tic = time.perf_counter()
    for update in range(1, updates + 1):
        policy.train()
        rollout, stats = collector.collect()
        env_steps += int(rollout.valid.sum())
        success = float(rollout.rewards.sum(0).mean())  # sparse reward: the return is the success
        add_progress_shaping(rollout, PROGRESS_SHAPING)
        algorithm.set_progress((update - 1) / updates)  # anneal_lr: the first update at the full rate
        metrics = algorithm.update(algorithm.process_rollout(rollout))
        curve.append(round(success, 4))
        if log and update % 10 == 0:
            recent = statistics.mean(curve[-10:])
            print(
                f"  seed {seed} update {update}: training success (last 10 batches) {recent:.2f}, return "
                f"{statistics.mean(stats.returns):.1f}, approx_kl {metrics.get('train/approx_kl', 0):.4f}, "
                f"clipfrac {metrics.get('train/clipfrac', 0):.3f} ({time.perf_counter() - tic:.0f} s)",
                flush=True,
            )
    envs.close()
    return training_figures(policy, tic, updates, updates * envs.num_envs, env_steps, curve)


def run_seed(
    seed: int, bc_steps: int, rl_updates: int, groups: int, test_episodes: int, method: str, folder: Path
) -> dict[str, Any]:
    """BC, evaluation, fine-tuning (``method``) and evaluation again for one seed.

    "Before" is the clone as the method starts from it: the chain copy (``grpo``, ``ppo``) or the
    steering policy at initialisation (``steering``: deterministic acting from the mean noise, 0).
    """
    bc, bc_s = behaviour_cloning(bc_steps, seed)
    policy = steering_policy(bc, folder / f"bc{seed}") if method == "steering" else rl_copy(bc)
    before = {
        "deterministic": evaluate(policy, test_episodes, True),
        "sampled": evaluate(policy, test_episodes, False, seed),
    }
    print(
        f"seed {seed}: BC {bc_s:.0f} s, success deterministic {before['deterministic']['success']:.2f}, "
        f"sampled (SDE) {before['sampled']['success']:.2f}",
        flush=True,
    )
    if method == "grpo":
        training = fine_tune(policy, rl_updates, seed, groups)
    else:
        training = fine_tune_ppo(policy, rl_updates, seed, steering=method == "steering")
    after = {
        "deterministic": evaluate(policy, test_episodes, True),
        "sampled": evaluate(policy, test_episodes, False, seed),
    }
    print(
        f"seed {seed}: fine-tuned {training['rl_s']:.0f} s ({training['updates']} updates, "
        f"{training['episodes']} episodes), success deterministic {after['deterministic']['success']:.2f}, "
        f"sampled (SDE) {after['sampled']['success']:.2f}",
        flush=True,
    )
    return {"seed": seed, "bc_s": round(bc_s, 1), "before": before, "after": after, **training}


def paired_gain(rows: list[dict[str, Any]], mode: str) -> tuple[float, float]:
    """Mean over seeds of the success gain (after - before) in ``mode`` and its standard error.

    The standard error is that of the mean of the per-seed gains (0 with one seed): it covers both
    the test episodes' sampling and the seed-to-seed spread of BC and RL.
    """
    gains = [r["after"][mode]["success"] - r["before"][mode]["success"] for r in rows]
    se = statistics.stdev(gains) / len(gains) ** 0.5 if len(gains) > 1 else 0.0
    return round(statistics.mean(gains), 4), round(se, 4)


def main() -> None:
    """Demonstrate, clone, fine-tune and evaluate per seed; the last line is JSON."""
    from omnigym.platform.runtime.processes import map_in_processes

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one seed, shorter BC and fine-tuning")
    parser.add_argument("--seeds", type=int, nargs="*", help="seeds to run (default: 0 to 6; quick: 0)")
    parser.add_argument("--rl-updates", type=int, help="RL updates per seed")
    parser.add_argument("--groups", type=int, help=f"groups of {GROUP_SIZE} episodes per GRPO batch")
    parser.add_argument("--method", choices=METHODS, default="ppo", help="fine-tuning method (see METHODS)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per process")
    parser.add_argument(
        "--jobs", type=int, default=0,
        help="processes the seeds are spread over (0: 2 for a full run of several seeds, else 1)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.quick:
        seeds, rl_updates, groups, test_episodes = [0], QUICK_UPDATES, QUICK_GROUPS, 50
    else:
        seeds, rl_updates, groups, test_episodes = list(FULL_SEEDS), FULL_UPDATES, FULL_GROUPS, 200
    seeds = args.seeds if args.seeds else seeds
    jobs = min(args.jobs or (2 if not args.quick else 1), len(seeds))
    if jobs < 1:
        parser.error("--jobs must be >= 1")
    if args.method != "grpo" and not args.quick:
        rl_updates = PPO_FULL_UPDATES
    rl_updates = args.rl_updates or rl_updates
    groups = args.groups or groups
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = str(Path(tmp) / "datasets")
        summary = demonstrations(DEMO_EPISODES)
        print(
            f"demonstrations: {DEMO_EPISODES} noisy expert episodes (noise {DEMO_NOISE}), {summary.steps} "
            f"steps, success {summary.success_rate:.2f}",
            flush=True,
        )
        references = {
            "expert": evaluate(expert_policy(), test_episodes, True),
            "noisy_expert": evaluate(expert_policy(DEMO_NOISE), test_episodes, False),
            "random": evaluate(random_policy(), test_episodes, False),
        }
        for name, row in references.items():
            print(f"{name}: success {row['success']:.2f}, length {row['length']:.1f}", flush=True)
        work = [(seed, BC_STEPS, rl_updates, groups, test_episodes, args.method, Path(tmp)) for seed in seeds]
        rows = map_in_processes(run_seed, work, jobs, args.threads)  # workers inherit the dataset path
    header = ("seed", "BC det", "RL det", "BC SDE", "RL SDE", "BC s", "RL s")
    print("\n" + " | ".join(f"{h:>6}" for h in header))
    for r in rows:
        b, a = r["before"], r["after"]
        cells = [
            f"{r['seed']:>6}",
            *(f"{p[m]['success']:>6.2f}" for m in ("deterministic", "sampled") for p in (b, a)),
            f"{r['bc_s']:>6.0f}",
            f"{r['rl_s']:>6.0f}",
        ]
        print(" | ".join(cells))
    ratios = [
        r["after"]["deterministic"]["success"] / max(r["before"]["deterministic"]["success"], 1e-9)
        for r in rows
    ]

    def mean(phase: str, mode: str) -> float:
        return round(statistics.mean(r[phase][mode]["success"] for r in rows), 4)

    gain, gain_se = paired_gain(rows, "deterministic")
    gain_sampled, gain_sampled_se = paired_gain(rows, "sampled")
    print(
        f"mean deterministic success {mean('before', 'deterministic'):.3f} -> "
        f"{mean('after', 'deterministic'):.3f} (gain {gain:+.3f}, standard error {gain_se:.3f}), "
        f"sampled {mean('before', 'sampled'):.3f} -> {mean('after', 'sampled'):.3f} (gain "
        f"{gain_sampled:+.3f}, standard error {gain_sampled_se:.3f}); expert "
        f"{references['expert']['success']:.2f}, random {references['random']['success']:.2f}"
    )
    print(json.dumps({
        "bench": "pushcube_rl_finetune",
        "ratio": round(statistics.mean(ratios), 4), "method": args.method,
        "bc_success": mean("before", "deterministic"), "rl_success": mean("after", "deterministic"),
        "bc_success_sampled": mean("before", "sampled"), "rl_success_sampled": mean("after", "sampled"),
        "gain": gain, "gain_se": gain_se, "gain_sampled": gain_sampled, "gain_sampled_se": gain_sampled_se,
        "expert_success": references["expert"]["success"], "random_success": references["random"]["success"],
        "references": references, "seeds": rows, "ratios": [round(x, 4) for x in ratios],
        "demo_episodes": DEMO_EPISODES, "demo_noise": DEMO_NOISE, "demo_steps": summary.steps,
        "demo_success": summary.success_rate, "bc_steps": BC_STEPS, "rl_updates": rl_updates,
        "policy_overrides": POLICY, "grpo": {
            **GRPO_SETTINGS, "group_size": GROUP_SIZE, "num_groups": groups,
            "max_episode_steps": RL_MAX_STEPS, "sde_noise_level": SDE_NOISE_LEVEL,
            "ft_denoising_steps": FT_DENOISING_STEPS, "logprob_slice": LOGPROB_SLICE,
            "progress_shaping": PROGRESS_SHAPING,
        },
        "ppo": {**PPO_SETTINGS, "envs": PPO_ENVS, "steps": PPO_STEPS, "critic_warmup": CRITIC_WARMUP},
        "steering": STEERING_SETTINGS,
        "test_episodes": test_episodes, "threads": torch.get_num_threads(), "torch_threads": args.threads,
        "jobs": jobs, "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
