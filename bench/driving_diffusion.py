"""Trajectory diffusion planners behaviour-cloned from the PDM-Closed-like planner, scored by PDMS.

1. Demonstrations: ``pdm_closed`` drives ``omnigym/DrivingPlan-v0`` (NAVSIM-style 4 s plans of 8
   poses, log-replay traffic, vector observations) on training scenes; the episodes are written
   as a Minari dataset with :func:`~omnigym.platform.datasets.collect_dataset` (in a temporary
   ``$MINARI_DATASETS_PATH``) and read back with ``load_dataset_steps``.
2. Behaviour cloning (DDPM, the chunk policies' imitation loop ``train_imitation``) of
   ``diffusion_planner`` (the whole plan is one diffusion sample, DDIM sampling) and
   ``hierarchical_diffusion_planner`` (HAD-style: anchors by diffusion, a heading-consistent
   spline expansion, a partial-diffusion refinement), each from its ``configs/policy`` file.
3. Evaluation on the held-out test split (deterministic plans): PDMS and EPDMS of both planners,
   of ``constant_velocity`` and of ``pdm_closed`` (the teacher).

Last line: one JSON object; ``ratio`` = the flat diffusion planner's PDMS / constant velocity's
(above 1: the diffusion planner drives better than constant velocity), ``ratio_hierarchical`` =
hierarchical PDMS / flat PDMS, and every figure.

``--split hard`` evaluates on the hard split (tight curves, braking lead vehicles: see
docs/envs/driving.md) and draws the demonstration scenes with the same settings (``scene`` =
``HARD_SCENES`` on the train split).

Usage: ``omnigym bench driving_diffusion [--quick] [--seed N] [--jobs N] [--threads N]
[--split test|hard]`` (full: 200 demonstration episodes, 6000 BC steps of 256 plans per planner,
100 test scenes, about 45 min on a 2-core CPU; quick: 48 episodes, 800 steps of 128, 48 test
scenes, about 7 min on one CPU thread).
``--seed`` sets the planners' initialisation and window order (the demonstrations and test
scenes stay the same), so that reruns measure the seed-to-seed spread; ``--jobs 2`` trains the
two planners at once in two processes (the default for a full run on a CPU). ``--threads N``:
torch CPU threads of this process and of each worker (default ``$OMNIGYM_THREADS``, else 1;
``torch_threads`` in the JSON). Figures measured before this option (issue 27) trained in
one-thread workers with ``--jobs 2`` but ran the evaluations, and with ``--jobs 1`` (quick) the
training too, with torch's default, one thread per core (2 on the 2-core machine of the docs).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

DURATIONS = {"quick": "7 min (1 thread)", "full": "44 min (--jobs 2)"}
"""Measured on a 2-core CPU: docs/policies.md, "Trajectory diffusion planners" (quick and full runs)."""

ENV_ID = "omnigym/DrivingPlan-v0"
OBS_KEYS = ["state", "agents", "route", "lanes", "lights"]
TRAIN: dict[str, Any] = {"split": "train", "num_scenes": 200, "obs_keys": OBS_KEYS}
EVAL_SEED = 1_000_000
PLANNERS = ("diffusion_planner", "hierarchical_diffusion_planner")
DATASET_ID = "omnigym/driving-pdm-closed-v0"


def scenes(split: str) -> tuple[dict[str, Any], str]:
    """The training env kwargs and the evaluation split of ``--split`` (test or hard)."""
    from omnigym.envs.driving.scenes import HARD_SCENES

    return ({**TRAIN, "scene": HARD_SCENES}, "hard") if split == "hard" else (TRAIN, "test")


def demonstrations(episodes: int, dataset_id: str, train: dict[str, Any] = TRAIN) -> int:
    """``pdm_closed``'s episodes on training scenes, collected to a Minari dataset; their step count."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.datasets import collect_dataset
    from omnigym.platform.vec_env import make_env

    planner_cls = POLICIES.get("pdm_closed")
    env = make_env(ENV_ID, **{**train, **planner_cls.env_kwargs})
    planner = planner_cls(planner_cls.config_class(), env.observation_space, env.action_space)
    env.close()
    return collect_dataset(
        planner, ENV_ID, dataset_id, episodes=episodes, seed=0, env_kwargs=dict(train)
    ).steps


def behaviour_cloning(
    name: str, bc_steps: int, batch_size: int, device: str, seed: int, out: str
) -> dict[str, Any]:
    """Clone ``name`` (built from ``configs/policy/<name>.yaml``) from the demonstrations; save it to ``out``.

    Runs in the bench's process or in a worker process (``--jobs``), hence plain arguments; the
    demonstrations are read from ``$MINARI_DATASETS_PATH``, which a worker inherits. Returns the
    training time and the last losses.
    """
    from omnigym.core.config import build_dataclass, load_yaml
    from omnigym.core.registry import POLICIES
    from omnigym.platform.datasets import load_dataset_steps
    from omnigym.platform.experiment import config_dir
    from omnigym.platform.trainers.imitation import ImitationConfig, train_imitation
    from omnigym.platform.vec_env import make_env
    from omnigym.policies.chunking.data import DemoWindows

    tic = time.perf_counter()
    steps = load_dataset_steps(DATASET_ID)
    cls = POLICIES.get(name)
    config = build_dataclass(
        cls.config_class, load_yaml(config_dir() / "policy" / f"{name}.yaml"), path="policy"
    )
    env = make_env(ENV_ID, **TRAIN)
    torch.manual_seed(seed)
    policy = cls(config, env.observation_space, env.action_space)
    env.close()
    obs = {key: steps.obs[key] for key in OBS_KEYS}
    policy.fit_normalizers(obs, steps.actions)
    policy.to(device)
    windows = DemoWindows(obs, steps.actions, steps.episode_index, 1, 1)
    imitation = ImitationConfig(
        steps=bc_steps, batch_size=batch_size, learning_rate=1e-3, warmup_steps=100, log_every=0, seed=seed
    )
    history = train_imitation(policy, windows, imitation)
    train_s = time.perf_counter() - tic
    policy.to("cpu").save_pretrained(out)
    losses = {k: round(v, 4) for k, v in history[-1].items() if k.startswith("train/loss")}
    return {"train_s": round(train_s, 1), "final_loss": losses}


def evaluate(
    policy: Any, episodes: int, env_kwargs: dict[str, Any] | None = None, split: str = "test"
) -> dict[str, float]:
    """PDMS and EPDMS of deterministic plans on the first ``episodes`` scenes of ``split``."""
    from omnigym.platform.evaluate import evaluate_policy

    kwargs = {"split": split, "num_scenes": episodes, "obs_keys": OBS_KEYS, **(env_kwargs or {})}
    summary = evaluate_policy(
        policy, ENV_ID, episodes=episodes, seed=EVAL_SEED, num_envs=16, env_kwargs=kwargs
    ).summary()
    return {"pdms": round(summary["pdms_mean"], 4), "epdms": round(summary["epdms_mean"], 4)}


def baseline(name: str) -> Any:
    """A registered driving baseline with its default config."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.vec_env import make_env

    cls = POLICIES.get(name)
    env = make_env(ENV_ID, **{**TRAIN, **getattr(cls, "env_kwargs", {})})
    policy = cls(cls.config_class(), env.observation_space, env.action_space)
    env.close()
    return policy, dict(getattr(cls, "env_kwargs", {}))


def main() -> None:
    """Demonstrate, clone both planners, evaluate; print the figures (the last line is JSON)."""
    from omnigym.core.policy import Policy
    from omnigym.platform.runtime import apply_thread_policy
    from omnigym.platform.runtime.processes import map_in_processes

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="48 episodes, 800 BC steps of 128, 48 test scenes"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--split", choices=("test", "hard"), default="test",
        help="evaluate on the test or the hard split (hard: demonstration scenes drawn like it)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="planners' initialisation and window order")
    parser.add_argument(
        "--jobs", type=int, default=0,
        help="planners trained at once, each in its own process (0: 2 for a full run on a CPU, else 1)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="torch CPU threads (default $OMNIGYM_THREADS, else 1)",
    )  # fmt: skip
    args = parser.parse_args()
    threads = apply_thread_policy(args.threads)
    jobs = args.jobs or (2 if args.device == "cpu" and not args.quick else 1)
    if jobs < 1:
        parser.error("--jobs must be >= 1")
    episodes, bc_steps, batch_size, test_scenes = (48, 800, 128, 48) if args.quick else (200, 6000, 256, 100)
    start = time.perf_counter()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = str(Path(tmp) / "datasets")
        train, split = scenes(args.split)
        demo_steps = demonstrations(episodes, DATASET_ID, train)
        seconds = time.perf_counter() - start
        print(f"demonstrations: {demo_steps} planner steps, {episodes} training episodes ({seconds:.0f} s)")
        for name in ("constant_velocity", "pdm_closed"):
            policy, env_kwargs = baseline(name)
            figures[name] = evaluate(policy, test_scenes, env_kwargs, split)
            print(f"{name}: {split} PDMS {figures[name]['pdms']:.3f}, EPDMS {figures[name]['epdms']:.3f}")
        work = [
            (name, bc_steps, batch_size, args.device, args.seed, str(Path(tmp) / name)) for name in PLANNERS
        ]
        trained = dict(zip(PLANNERS, map_in_processes(behaviour_cloning, work, jobs, threads), strict=True))
        for name in PLANNERS:
            tic = time.perf_counter()
            planner = Policy.from_pretrained(Path(tmp) / name)
            row = {**evaluate(planner, test_scenes, split=split), **trained[name]}
            figures[name] = {**row, "eval_s": round(time.perf_counter() - tic, 1)}
            print(
                f"{name}: {split} PDMS {row['pdms']:.3f}, EPDMS {row['epdms']:.3f} "
                f"(BC {row['train_s']:.0f} s, eval {figures[name]['eval_s']:.0f} s, {row['final_loss']})"
            )
    flat, hier = figures["diffusion_planner"]["pdms"], figures["hierarchical_diffusion_planner"]["pdms"]
    const = figures["constant_velocity"]["pdms"]
    print(json.dumps({
        "bench": "driving_diffusion",
        "ratio": flat / const if const else float("inf"),
        "ratio_hierarchical": hier / flat if flat else float("inf"),
        "diffusion_pdms": flat, "hierarchical_pdms": hier,
        "constant_velocity_pdms": const, "pdm_closed_pdms": figures["pdm_closed"]["pdms"],
        "figures": figures, "demo_episodes": episodes, "demo_steps": demo_steps,
        "bc_steps": bc_steps, "batch_size": batch_size, "test_scenes": test_scenes, "split": split,
        "seed": args.seed,
        "jobs": jobs, "torch_threads": threads, "device": args.device, "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
