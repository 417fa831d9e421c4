"""Planner over controller vs the same controller told only the task, on PickPlace (state obs).

1. Demonstrations: ``pickplace_expert`` acting stochastically (its 0.1 action noise, for diverse
   demonstrations) on ``omnigym/PickPlace-v0``, episodes seeded 0, 1, ..., written as a Minari
   dataset with :func:`~omnigym.platform.datasets.collect_dataset` (a temporary
   ``$MINARI_DATASETS_PATH``).
2. Relabelling (Instruct-to-Act): every step gets the sub-goal of the expert stage it was taken in
   (:func:`~omnigym.policies.hierarchical.subgoals.relabel_episodes`, read back from the state).
3. Two controllers per seed, the same flow-matching chunk policy (``hierarchical``'s CPU-sized
   default) on the same windows with the same optimiser steps and seed: one conditioned on the
   embedding of each step's sub-goal, one on the embedding of the task instruction (a constant).
4. Evaluation on the same held-out episodes (seeds from ``EVAL_SEED``), deterministic acting:
   (a) ``hierarchical`` with the ``scripted`` planner (a sub-goal every ``--every-k`` steps) over
   the sub-goal controller; (b) ``hierarchical`` with the ``instruction`` planner over the
   instruction controller. Paired per seed: gain = success(a) - success(b).

Last line: one JSON object; ``ratio`` = mean success(a) / mean success(b) over the seeds, with
the per-seed figures, the mean paired gain and its standard error.

Usage: ``omnigym bench hierarchical_pickplace [--quick]`` (quick: 3 seeds, 30 demonstrations,
1,600 BC steps, 30 test episodes; full: 5 seeds, 50 demonstrations, 3,000 steps, 100 episodes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

DURATIONS = {"quick": "642 s (--jobs 2, loaded)", "full": "not recorded"}
"""On a 2-core CPU: docs/policies.md, "PickPlace: planner + controller" (the quick run)."""

TASK_NAME = "pickplace"
"""The ``hierarchical`` task (``omnigym.policies.hierarchical.tasks``) the functions below run;
``bench/hierarchical_two_stage.py`` points it at the two-stage push."""
EVAL_SEED = 10_000
"""First test episode's seed (the demonstrations use seeds 0, 1, ...)."""
BUDGETS: dict[str, dict[str, int]] = {
    "quick": {"seeds": 3, "demos": 30, "bc_steps": 1600, "episodes": 30},
    "full": {"seeds": 5, "demos": 50, "bc_steps": 3000, "episodes": 100},
}
"""Seeds, demonstration episodes, BC steps per controller and test episodes of a quick and a full run."""
LABELS = "noisy"
"""The actions cloned by default: ``noisy`` (as executed) or ``expert`` (:func:`expert_labels`)."""
CONTROLLER: dict[str, Any] = {}
"""Overrides of ``hierarchical``'s default controller (``SMALL_FLOW``) for both controllers."""
LEARNING_RATE = 1e-3
"""Peak AdamW rate (cosine decay): Diffusion Policy's 1e-4 needs far more steps than a CPU run."""


def task() -> Any:
    """The :class:`~omnigym.policies.hierarchical.tasks.SubgoalTask` of ``TASK_NAME``."""
    from omnigym.policies.hierarchical.tasks import get_task

    return get_task(TASK_NAME)


def dataset_id() -> str:
    """The demonstrations' Minari id, e.g. ``omnigym/pickplace-expert-v0``."""
    return f"omnigym/{TASK_NAME.replace('_', '-')}-expert-v0"


def expert_labels(steps: Any) -> np.ndarray:
    """The noise-free expert's action at every demonstration step (DART's labels).

    The demonstrations were acted with the expert's noise (diverse states, recoveries included);
    labelled with what the noise-free expert would do in each of them, a clone learns the
    corrections without the noise (Laskey et al., 2017). Episodes are replayed in order with the
    expert's memory reset at each start, so an expert that remembers (the two-stage push's
    marker) labels each step as it acted.
    """
    from omnigym.core.registry import POLICIES
    from omnigym.platform.vec_env import make_env

    cls = POLICIES.get(task().expert)
    env = make_env(task().env_id)
    expert = cls(cls.config_class(), env.observation_space, env.action_space)
    env.close()
    state = torch.as_tensor(np.asarray(steps.obs["state"], dtype=np.float32))
    labels = np.empty_like(np.asarray(steps.actions, dtype=np.float32))
    starts = np.flatnonzero(np.r_[True, steps.episode_index[1:] != steps.episode_index[:-1]])
    for start, end in zip(starts, [*starts[1:], len(state)], strict=True):
        expert.reset()
        for i in range(start, end):
            labels[i] = expert.act({"state": state[i : i + 1]}, deterministic=True).action[0].numpy()
    return labels


def demonstrations(episodes: int) -> Any:
    """The task expert's stochastic episodes (seeds 0..episodes-1), collected to :func:`dataset_id`."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.datasets import collect_dataset, load_dataset_steps
    from omnigym.platform.vec_env import make_env

    cls = POLICIES.get(task().expert)
    env = make_env(task().env_id)
    expert = cls(cls.config_class(), env.observation_space, env.action_space)
    env.close()
    summary = collect_dataset(
        expert, task().env_id, dataset_id(), episodes=episodes, seed=0, deterministic=False
    )
    return summary, load_dataset_steps(dataset_id())


def train_controller(
    steps: Any,
    condition: str,
    seed: int,
    bc_steps: int,
    out: Path,
    embedding_dim: int = 32,
    relabel: str = "expert",
    task_name: str = "",
    controller: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Behaviour-clone the sub-goal-conditioned flow controller; save it to ``out``.

    Args:
        steps: the demonstrations (:class:`~omnigym.platform.datasets.DatasetSteps`, ``state`` obs).
        condition: ``subgoal`` (each step's relabelled sub-goal) or ``instruction`` (the task's text).
        seed: network initialisation and window order.
        bc_steps: optimiser steps.
        out: where to save the controller.
        embedding_dim: width of the sub-goal embedding.
        relabel: PickPlace's switching points the demonstrations are relabelled at: ``planner``
            (the scripted planner's) or ``expert`` (the expert's own, narrower); other tasks have
            one rule.
        task_name: the task (empty: ``TASK_NAME``). Passed explicitly because ``run_seed``'s worker
            processes import this module afresh, with its defaults.
        controller: the controller's overrides (None: ``CONTROLLER``), for the same reason.
    """
    from gymnasium import spaces

    from omnigym.core.config import build_dataclass
    from omnigym.core.registry import POLICIES
    from omnigym.platform.trainers.imitation import ImitationConfig, train_imitation
    from omnigym.platform.vec_env import make_env
    from omnigym.policies.chunking.data import DemoWindows
    from omnigym.policies.hierarchical.policy import SMALL_FLOW, SUBGOAL_KEY, controller_space
    from omnigym.policies.hierarchical.subgoals import PLANNER_TOLERANCES, embed_text, relabel_episodes
    from omnigym.policies.hierarchical.tasks import get_task

    spec = get_task(task_name or TASK_NAME)
    overrides = CONTROLLER if controller is None else controller
    state = np.asarray(steps.obs["state"], dtype=np.float32)
    if condition == "subgoal":
        if spec.name == "pickplace" and relabel == "planner":
            labels = relabel_episodes(state, steps.episode_index, tolerances=PLANNER_TOLERANCES)
        else:
            labels = spec.relabel(state, steps.episode_index)
        texts = [spec.subgoals[i] for i in labels]
    elif condition == "instruction":
        texts = [spec.instruction] * len(state)
    else:
        raise ValueError(f"condition must be 'subgoal' or 'instruction', got {condition!r}")
    env = make_env(spec.env_id)
    assert isinstance(env.observation_space, spaces.Dict)
    obs_space = controller_space(env.observation_space, embedding_dim)
    cls = POLICIES.get("flow")
    config = build_dataclass(
        cls.config_class, {**SMALL_FLOW, **overrides, "obs_keys": ["state", SUBGOAL_KEY]}, path="policy"
    )
    torch.manual_seed(seed)
    controller = cls(config, obs_space, env.action_space)
    env.close()
    obs = {"state": state, SUBGOAL_KEY: embed_text(texts, embedding_dim)}
    controller.fit_normalizers(obs, steps.actions)
    windows = DemoWindows(obs, steps.actions, steps.episode_index, config.n_obs_steps, config.horizon)
    imitation = ImitationConfig(
        steps=bc_steps, batch_size=64, learning_rate=LEARNING_RATE, warmup_steps=50, seed=seed, log_every=0
    )
    tic = time.perf_counter()
    history = train_imitation(controller, windows, imitation)
    controller.save_pretrained(out)
    return {"train_s": round(time.perf_counter() - tic, 1), "loss": round(history[-1]["train/loss_flow"], 4)}


def agent(planner: str, controller: Path, every_k: int) -> Any:
    """The ``hierarchical`` policy of ``planner`` over the saved controller."""
    from omnigym.platform.policy_fit import build_policy
    from omnigym.platform.vec_env import make_env
    from omnigym.policies.hierarchical.policy import HierarchicalPolicyConfig

    env = make_env(task().env_id)
    config = HierarchicalPolicyConfig(
        task=TASK_NAME, planner=planner, controller_path=str(controller), every_k_steps=every_k
    )
    policy = build_policy(
        "hierarchical", config, env.observation_space, env.action_space, env_id=task().env_id
    )
    env.close()
    return policy


def success(policy: Any, episodes: int) -> float:
    """Success rate of deterministic episodes seeded from ``EVAL_SEED``."""
    from omnigym.platform.evaluate import evaluate_policy

    result = evaluate_policy(
        policy, task().env_id, episodes=episodes, seed=EVAL_SEED, num_envs=min(episodes, 10)
    )
    return float(result.summary()["success_rate"])


def mean_and_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for a single value)."""
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, se


def run_seed(
    steps: Any,
    seed: int,
    bc_steps: int,
    test_episodes: int,
    every_k: int,
    root: Path,
    relabel: str = "expert",
    jobs: int = 1,
) -> dict[str, Any]:
    """Both controllers of one seed (trained in ``jobs`` processes), evaluated on the same episodes."""
    from omnigym.platform.runtime.processes import map_in_processes

    pairs = (("subgoal", "scripted"), ("instruction", "instruction"))
    work = [
        (steps, condition, seed, bc_steps, root / f"{condition}-{seed}", 32, relabel, TASK_NAME, CONTROLLER)
        for condition, _ in pairs
    ]
    trained = map_in_processes(train_controller, work, jobs)
    row: dict[str, Any] = {"seed": seed}
    for (condition, planner), result in zip(pairs, trained, strict=True):
        tic = time.perf_counter()
        rate = success(agent(planner, root / f"{condition}-{seed}", every_k), test_episodes)
        row[planner] = {"success": rate, **result, "eval_s": round(time.perf_counter() - tic, 1)}
        print(f"seed {seed} {planner:>11} planner: success {rate:.2f} ({result['train_s']:.0f} s BC, "
              f"loss {result['loss']}, {row[planner]['eval_s']:.0f} s eval)", flush=True)  # fmt: skip
    row["gain"] = row["scripted"]["success"] - row["instruction"]["success"]
    return row


def main(bench: str = "hierarchical_pickplace", description: str | None = __doc__) -> None:
    """Demonstrate, relabel, train both controllers per seed, evaluate; the last line is JSON."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    quick, full = BUDGETS["quick"], BUDGETS["full"]
    parser.add_argument(
        "--quick", action="store_true", help=", ".join(f"{value} {key}" for key, value in quick.items())
    )
    for key, text in (
        ("seeds", "training seeds"), ("demos", "demonstration episodes"),
        ("bc_steps", "BC steps per controller"), ("episodes", "test episodes"),
    ):  # fmt: skip
        parser.add_argument(
            f"--{key.replace('_', '-')}", type=int, default=0,
            help=f"{text} (0: {quick[key]} quick, {full[key]} full)",
        )  # fmt: skip
    parser.add_argument(
        "--first-seed", type=int, default=0, help="the seeds run are first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--every-k", type=int, default=1, help="env steps between planner calls (K)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (per training process)")
    parser.add_argument("--jobs", type=int, default=2, help="controllers trained at once, one process each")
    parser.add_argument(
        "--labels",
        choices=("noisy", "expert"),
        default=LABELS,
        help="clone the executed (noisy) actions or the noise-free expert's in the same states (DART)",
    )
    parser.add_argument(
        "--relabel", choices=("planner", "expert"), default="expert",
        help="relabel the demonstrations at the planner's (wider) or the expert's switching points",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    budget = BUDGETS["quick" if args.quick else "full"]
    seeds = args.seeds or budget["seeds"]
    demos = args.demos or budget["demos"]
    bc_steps = args.bc_steps or budget["bc_steps"]
    test_episodes = args.episodes or budget["episodes"]
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = str(Path(tmp) / "datasets")
        summary, steps = demonstrations(demos)
        print(
            f"demonstrations: {demos} episodes, {summary.steps} steps, expert success {summary.success_rate}"
        )
        if args.labels == "expert":
            steps = dataclasses.replace(steps, actions=expert_labels(steps))
        for seed in range(args.first_seed, args.first_seed + seeds):
            rows.append(
                run_seed(
                    steps, seed, bc_steps, test_episodes, args.every_k, Path(tmp), args.relabel, args.jobs
                )
            )
    planned = [r["scripted"]["success"] for r in rows]
    flat = [r["instruction"]["success"] for r in rows]
    gain, gain_se = mean_and_se([r["gain"] for r in rows])
    planned_mean, flat_mean = statistics.fmean(planned), statistics.fmean(flat)
    ratio = planned_mean / flat_mean if flat_mean > 0 else float("inf") if planned_mean > 0 else 1.0
    print(
        f"planner + controller {planned_mean:.3f} vs instruction-only {flat_mean:.3f}: paired gain "
        f"{gain:+.3f} +- {gain_se:.3f} (SE over {seeds} seeds), ratio {ratio:.2f}"
    )
    print(json.dumps({
        "bench": bench, "task": TASK_NAME, "ratio": ratio,
        "planner_success_mean": round(planned_mean, 4), "instruction_success_mean": round(flat_mean, 4),
        "gain_mean": round(gain, 4), "gain_se": round(gain_se, 4), "seeds": rows,
        "demo_episodes": demos, "demo_steps": summary.steps, "bc_steps": bc_steps,
        "test_episodes": test_episodes, "first_seed": args.first_seed, "every_k_steps": args.every_k,
        "relabel": args.relabel,
        "labels": args.labels, "controller_overrides": CONTROLLER,
        "quick": args.quick,
        "torch_threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
