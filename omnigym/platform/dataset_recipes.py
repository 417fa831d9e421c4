"""D4RL-style locomotion datasets, generated locally: random, medium, medium-replay, expert, medium-expert.

D4RL's MuJoCo datasets cannot be downloaded here, so omnigym makes their counterparts on
Gymnasium's ``-v5`` envs (HalfCheetah, Hopper, Walker2d) by D4RL's recipe:

* ``random``: a uniformly random policy;
* ``medium``: a SAC policy trained until its evaluation return reaches about a third of the
  D4RL expert return (``medium_fraction``), sampling its actions;
* ``medium-replay``: every transition in that SAC run's replay buffer up to that point;
* ``expert``: the best policy of the same SAC run, trained further (to ``expert_fraction`` of
  the expert return or until ``expert_budget`` env steps); on a CPU this budget rarely reaches
  D4RL's expert level, and the card says what it reached;
* ``medium-expert``: ``medium`` and ``expert`` together.

Behaviour policies are cached under ``$OMNIGYM_CACHE/d4rl/<task>/`` so every dataset of a task
comes from the same run. Each dataset gets a card (``card.json`` next to its Minari files, also
printed): episodes, steps, return and normalised-score statistics, the behaviour policy's own
evaluation and the recipe's settings. ``quick`` recipes are small and get their own ids
(``omnigym/hopper-medium-quick-v0``) so they never pass for the full ones.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from omnigym.platform.scores import D4RL_REFERENCE_RETURNS, normalized_score

if TYPE_CHECKING:
    from omnigym.platform.trainers.off_policy import OffPolicyTrainer

LOCOMOTION_ENVS = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "walker2d": "Walker2d-v5"}
KINDS = ("random", "medium", "medium-replay", "expert", "medium-expert")
CARD_FILE = "card.json"


@dataclass
class RecipeConfig:
    """How a task's datasets are made."""

    steps: int = 200_000
    """Transitions in each rolled-out dataset (D4RL: 1M; medium-replay has what training took)."""
    medium_fraction: float = 1 / 3
    """The medium policy's target return, as a fraction of the D4RL expert return."""
    medium_budget: int = 300_000
    """Env steps SAC may train to reach the medium target (the best policy so far otherwise)."""
    expert_fraction: float = 1.0
    """The expert policy's target return, as a fraction of the D4RL expert return."""
    expert_budget: int = 1_000_000
    """Env steps the SAC run may take in all, for the expert."""
    eval_every: int = 5_000
    """Env steps between evaluations of the SAC run (5 episodes each)."""
    seed: int = 0

    @classmethod
    def quick(cls) -> RecipeConfig:
        """A recipe that runs in minutes: small datasets, short SAC runs (far from the targets)."""
        return cls(steps=20_000, medium_budget=15_000, expert_budget=20_000, eval_every=5_000)


def dataset_id(task: str, kind: str, quick: bool = False) -> str:
    """``omnigym/<task>-<kind>[-quick]-v0``."""
    return f"omnigym/{task}-{kind}{'-quick' if quick else ''}-v0"


def parse_name(name: str) -> tuple[str, str]:
    """``"hopper-medium-replay"`` -> ``("hopper", "medium-replay")``.

    Raises:
        ValueError: an unknown task or kind.
    """
    task, _, kind = name.partition("-")
    if task not in LOCOMOTION_ENVS or kind not in KINDS:
        raise ValueError(
            f"unknown dataset recipe {name!r}: <task>-<kind> with task in {sorted(LOCOMOTION_ENVS)} "
            f"and kind in {list(KINDS)}"
        )
    return task, kind


def cache_dir(task: str, quick: bool = False) -> Path:
    """Where a task's behaviour policies live: ``$OMNIGYM_CACHE/d4rl/<task>[-quick]``."""
    root = Path(os.environ.get("OMNIGYM_CACHE") or Path.home() / ".cache" / "omnigym")
    return root / "d4rl" / f"{task}{'-quick' if quick else ''}"


def dataset_exists(dataset: str) -> bool:
    """Whether Minari dataset ``dataset`` is in local storage."""
    from minari.storage import get_dataset_path

    return get_dataset_path(dataset).exists()


def ensure_dataset(name: str, *, quick: bool = False, config: RecipeConfig | None = None) -> str:
    """The id of recipe ``name``'s dataset (e.g. ``hopper-medium``), made first if missing."""
    task, kind = parse_name(name)
    target = dataset_id(task, kind, quick)
    if not dataset_exists(target):
        make_dataset(task, kind, quick=quick, config=config)
    return target


def make_dataset(
    task: str,
    kind: str,
    *,
    quick: bool = False,
    config: RecipeConfig | None = None,
    train_expert: bool = False,
) -> dict[str, Any]:
    """Make one dataset of ``task`` (and the behaviour policies it needs); returns its card.

    A SAC run that only had to reach the medium policy stops there; a later expert dataset then
    trains a second run. ``train_expert`` trains on to the expert in the first run already (when
    the expert datasets will be wanted too).
    """
    config = config or (RecipeConfig.quick() if quick else RecipeConfig())
    env_id = LOCOMOTION_ENVS[task]
    target = dataset_id(task, kind, quick)
    if kind == "random":
        from omnigym.core.registry import POLICIES
        from omnigym.platform.vec_env import make_env

        env = make_env(env_id)
        random_cls = POLICIES.get("random")
        policy = random_cls(random_cls.config_class(), env.observation_space, env.action_space)
        env.close()
        return _rollout_dataset(policy, task, kind, target, config, {"policy": "uniform random"})
    if kind == "medium-expert":
        parts = []
        for part in ("medium", "expert"):
            if not dataset_exists(dataset_id(task, part, quick)):
                make_dataset(task, part, quick=quick, config=config, train_expert=True)
            parts.append(dataset_id(task, part, quick))
        return _combine(parts, task, kind, target)
    runs = behaviour_policies(task, config, quick, need_expert=train_expert or kind == "expert")
    if kind == "medium-replay":
        if not dataset_exists(target):
            raise FileNotFoundError(
                f"{target} is missing but {cache_dir(task, quick)} holds a finished SAC run: delete that "
                "folder to train again and write the replay buffer"
            )
        return read_card(target)
    from omnigym.core.policy import Policy

    policy = Policy.from_pretrained(Path(runs[kind]["path"]))
    return _rollout_dataset(policy, task, kind, target, config, runs[kind])


def behaviour_policies(task: str, config: RecipeConfig, quick: bool, need_expert: bool) -> dict[str, Any]:
    """The task's medium (and, if needed, expert) SAC policies; trains what the cache lacks.

    The medium-replay dataset is written from the replay buffer when the medium policy is saved.
    Returns ``kind -> {"path", "eval_return", "normalized_score", "sac_steps"}``.
    """
    root = cache_dir(task, quick)
    index_path = root / "policies.json"
    index: dict[str, Any] = json.loads(index_path.read_text()) if index_path.is_file() else {}
    if "medium" in index and (not need_expert or "expert" in index):
        return index
    expert_return = D4RL_REFERENCE_RETURNS[task][1]
    medium_target = config.medium_fraction * expert_return
    expert_target = config.expert_fraction * expert_return
    budget = config.expert_budget if need_expert else config.medium_budget
    trainer = _sac_trainer(task, config, root / "sac_run", budget)

    def record(kind: str) -> None:
        assert trainer.last_eval is not None
        path = root / kind
        shutil.rmtree(path, ignore_errors=True)
        trainer.policy.save_pretrained(path)
        value = trainer.last_eval["return_mean"]
        index[kind] = {"path": str(path), "eval_return": value, "sac_steps": trainer.steps,
                       "normalized_score": normalized_score(task, value)}  # fmt: skip
        if kind == "medium":
            _write_replay(trainer, task, config, quick)
        root.mkdir(parents=True, exist_ok=True)
        index_path.write_text(json.dumps(index, indent=2))  # now: a killed run keeps what it reached

    def after_eval(_: Any) -> bool:
        assert trainer.last_eval is not None
        value = trainer.last_eval["return_mean"]
        if "medium" not in index and (value >= medium_target or trainer.steps >= config.medium_budget):
            record("medium")
            if not need_expert:
                return True
        if need_expert and value >= expert_target:
            record("expert")
            return True
        return False

    trainer.after_eval = after_eval
    wanted = "medium and expert policies" if need_expert else "medium policy"
    print(
        f"[omnigym] datasets make {task}: training SAC for the {wanted} (at most {budget:,} env steps, "
        "stopping at the target return; the step line's eta is for the whole budget)",
        file=sys.stderr,
        flush=True,
    )
    trainer.train()
    if "medium" not in index:
        record("medium")
    if need_expert and "expert" not in index:  # the budget ended first: the run's best policy
        index["expert"] = _best_policy_as_expert(trainer, task, root)
    root.mkdir(parents=True, exist_ok=True)
    index_path.write_text(json.dumps(index, indent=2))
    return index


def _sac_trainer(task: str, config: RecipeConfig, run_dir: Path, budget: int) -> OffPolicyTrainer:
    """A fresh SAC run (``off_policy`` trainer, ``budget`` env steps) on the task's env in ``run_dir``."""
    from omnigym.core.config import config_to_dict
    from omnigym.platform.experiment import build_experiment
    from omnigym.platform.trainers.off_policy import OffPolicyTrainer

    experiment = build_experiment(
        {
            "name": f"sac_{task}_behaviour",
            "seed": config.seed,
            "trainer": "off_policy",
            "total_steps": budget,
            "run_dir": str(run_dir),
            "env": {"id": LOCOMOTION_ENVS[task], "num_envs": 1},
            "policy": {"type": "mlp", "hidden_sizes": [256, 256], "activation": "relu",
                       "action_head": "squashed_gaussian", "ortho_init": False},
            "algo": {"type": "sac", "learning_starts": 5_000, "normalize_obs": False},
            "eval": {"every_steps": config.eval_every, "episodes": 5},
            "log": {"every_steps": config.eval_every, "progress": True, "tensorboard": False},
        }
    )  # fmt: skip
    resume = _resumable(run_dir, config_to_dict(experiment))
    if resume:
        print(f"[omnigym] datasets make {task}: continuing the SAC run killed in {run_dir}", file=sys.stderr)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return OffPolicyTrainer(experiment, run_dir, resume=resume)


def _resumable(run_dir: Path, config: dict[str, Any]) -> bool:
    """Whether ``run_dir`` holds an unfinished SAC run of exactly ``config`` with a checkpoint to resume.

    Behaviour runs take hours on a CPU; one killed part-way (Ctrl-C, a closed session) continues
    from its last checkpoint (every 10 minutes, with the replay buffer) instead of starting over.
    """
    import yaml

    from omnigym.platform.checkpoint import latest_checkpoint
    from omnigym.platform.run_dirs import CONFIG_FILE, RESULTS_FILE

    if (run_dir / RESULTS_FILE).exists() or latest_checkpoint(run_dir) is None:
        return False
    try:
        return bool(yaml.safe_load((run_dir / CONFIG_FILE).read_text()) == config)
    except (OSError, yaml.YAMLError):
        return False


def _best_policy_as_expert(trainer: OffPolicyTrainer, task: str, root: Path) -> dict[str, Any]:
    """Copy the SAC run's best policy to ``root/expert``; its index entry."""
    best = trainer.best_eval or trainer.last_eval or {}
    path = root / "expert"
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(root / "sac_run" / "best_policy", path)
    value = best.get("return_mean", float("nan"))
    return {
        "path": str(path),
        "eval_return": value,
        "sac_steps": int(best.get("step", trainer.steps)),
        "normalized_score": normalized_score(task, value),
    }


def _write_replay(trainer: Any, task: str, config: RecipeConfig, quick: bool) -> None:
    """The SAC run's replay buffer so far as the ``medium-replay`` dataset (replacing an old one)."""
    from minari.storage import get_dataset_path

    from omnigym.platform.datasets import write_episodes_dataset

    target = dataset_id(task, "medium-replay", quick)
    shutil.rmtree(get_dataset_path(target), ignore_errors=True)
    write_episodes_dataset(
        list(trainer.buffer.episodes()),
        LOCOMOTION_ENVS[task],
        target,
        label="sac:replay",
        description=f"every transition SAC collected on {LOCOMOTION_ENVS[task]} until its medium policy "
        f"({trainer.steps} env steps), omnigym's counterpart of D4RL {task}-medium-replay",
    )
    source = {"policy": "SAC replay buffer up to the medium policy", "sac_steps": trainer.steps}
    _card(target, task, "medium-replay", {**source, "recipe": asdict(config)})


def _rollout_dataset(
    policy: Any, task: str, kind: str, target: str, config: RecipeConfig, source: dict[str, Any]
) -> dict[str, Any]:
    """``config.steps`` transitions of ``policy`` sampling its actions, as dataset ``target``."""
    from omnigym.platform.datasets import collect_dataset

    print(
        f"[omnigym] datasets make: recording {config.steps:,} steps as {target}", file=sys.stderr, flush=True
    )
    collect_dataset(
        policy,
        LOCOMOTION_ENVS[task],
        target,
        steps=config.steps,
        seed=config.seed + 1_000_000,  # away from the SAC run's evaluation seeds
        deterministic=False,
        description=f"omnigym's counterpart of D4RL {task}-{kind}: {config.steps} transitions on "
        f"{LOCOMOTION_ENVS[task]}",
    )
    return _card(target, task, kind, {**source, "recipe": asdict(config)})


def _combine(parts: list[str], task: str, kind: str, target: str) -> dict[str, Any]:
    """Datasets ``parts`` together as ``target``."""
    import minari

    minari.combine_datasets([minari.load_dataset(p) for p in parts], new_dataset_id=target)
    return _card(target, task, kind, {"combines": parts})


def _card(target: str, task: str, kind: str, source: dict[str, Any]) -> dict[str, Any]:
    """Write and print dataset ``target``'s card: sizes, returns, normalised scores, provenance."""
    import minari
    from minari.storage import get_dataset_path

    dataset = minari.load_dataset(target)
    returns = np.array([float(np.sum(e.rewards)) for e in dataset.iterate_episodes()])
    scores = np.array([normalized_score(task, r) for r in returns])
    card = {
        "dataset_id": target, "task": task, "kind": kind, "env_id": LOCOMOTION_ENVS[task],
        "episodes": int(dataset.total_episodes), "steps": int(dataset.total_steps),
        "return_mean": float(returns.mean()), "return_std": float(returns.std()),
        "return_min": float(returns.min()), "return_max": float(returns.max()),
        "normalized_score_mean": float(scores.mean()), "source": source,
    }  # fmt: skip
    (get_dataset_path(target) / CARD_FILE).write_text(json.dumps(card, indent=2))
    print(json.dumps(card))
    return card


def read_card(dataset: str) -> dict[str, Any]:
    """A generated dataset's card.

    Raises:
        FileNotFoundError: the dataset has no card (not made by a recipe).
    """
    from minari.storage import get_dataset_path

    path = get_dataset_path(dataset) / CARD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{dataset} has no {CARD_FILE} (not made by a dataset recipe)")
    result: dict[str, Any] = json.loads(path.read_text())
    return result
