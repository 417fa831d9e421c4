"""``omnigym datasets``, ``omnigym vlm`` and ``omnigym bc``: data and imitation."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from omnigym.platform.cli.errors import UsageError
from omnigym.platform.loggers import format_eta

if TYPE_CHECKING:
    from omnigym.platform.datasets import DatasetSummary


def _cmd_datasets_make(args: argparse.Namespace) -> int:
    from omnigym.platform.dataset_recipes import (
        dataset_exists,
        dataset_id,
        make_dataset,
        parse_name,
        read_card,
    )

    for name in args.names:
        task, kind = parse_name(name)
        target = dataset_id(task, kind, args.quick)
        if dataset_exists(target):
            print(f"{target} exists already: {json.dumps(read_card(target))}")
            continue
        expert = any(parse_name(n)[0] == task and "expert" in parse_name(n)[1] for n in args.names)
        card = make_dataset(task, kind, quick=args.quick, train_expert=expert)
        print(
            f"wrote {target}: {card['episodes']} episodes, {card['steps']} steps, return "
            f"{card['return_mean']:.1f} +- {card['return_std']:.1f} "
            f"(normalised score {card['normalized_score_mean']:.1f})"
        )
    return 0


def _cmd_vlm(args: argparse.Namespace) -> int:
    from omnigym.policies.vlm.tiny import make_tiny

    path = make_tiny(args.arch, Path(args.out), seed=args.seed)
    print(f"tiny {args.arch} model, tokenizer and processor saved to {path}")
    return 0


def _cmd_vlm_sft(args: argparse.Namespace) -> int:
    import minari
    import torch

    from omnigym.core.config import apply_overrides, build_dataclass, load_yaml
    from omnigym.platform.evaluate import evaluate_policy, format_summary
    from omnigym.platform.experiment import config_dir
    from omnigym.platform.trainers.vlm_sft import SFTConfig, finetune_on_dataset
    from omnigym.policies.vlm.policy import VLMPolicyConfig

    base = load_yaml(config_dir() / "policy" / "vlm.yaml")
    policy_config = build_dataclass(VLMPolicyConfig, apply_overrides(base, args.overrides), path="policy")
    sft = SFTConfig(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, seed=args.seed)

    def log(step: int, metrics: dict[str, float]) -> None:
        elapsed = metrics["time/elapsed_s"]
        eta = format_eta(step, sft.steps, elapsed)
        print(
            f"step {step}/{sft.steps}: nll {metrics['train/sft_nll']:.4f} ({elapsed:.0f} s, {eta})",
            flush=True,
        )

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    policy, _ = finetune_on_dataset(
        args.dataset, policy_config, sft, successful_only=not args.all_episodes, callback=log, device=device
    )
    path = policy.save_pretrained(args.out)
    print(f"fine-tuned policy saved to {path} (Hugging Face model: {path / 'hf'})")
    if args.eval_episodes > 0:
        spec = minari.load_dataset(args.dataset).spec.env_spec
        result = evaluate_policy(
            policy, spec.id, episodes=args.eval_episodes, seed=args.eval_seed, env_kwargs=dict(spec.kwargs)
        )
        print(format_summary(result.summary()))
    return 0


def _cmd_bc(args: argparse.Namespace) -> int:
    import torch

    from omnigym.platform.trainers.imitation import ImitationConfig, imitate_dataset

    config = ImitationConfig(
        steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, seed=args.seed,
        log_every=args.log_every, eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        successful_only=args.successful_only,
    )  # fmt: skip

    def log(step: int, metrics: dict[str, float]) -> None:
        shown = {
            k: v
            for k, v in metrics.items()
            if k.startswith(("train/loss", "eval/success", "eval/return_mean"))
        }
        text = " ".join(f"{k} {v:.4g}" for k, v in shown.items())
        elapsed = metrics["time/elapsed_s"]
        eta = format_eta(step, config.steps, elapsed)
        print(f"step {step}/{config.steps}: {text} ({elapsed:.0f} s, {eta})", flush=True)

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    with _as_minari_dataset(args.dataset) as dataset_id:
        policy, _ = imitate_dataset(
            dataset_id, args.policy, args.overrides, config, callback=log, device=device
        )
    print(f"{args.policy} policy saved to {policy.save_pretrained(args.out)}")
    return 0


@contextlib.contextmanager
def _as_minari_dataset(dataset: str) -> Iterator[str]:
    """A Minari dataset id as it is; a recording or a LeRobot dataset as a temporary Minari dataset."""
    from omnigym.platform.episodes.format import MANIFEST
    from omnigym.platform.episodes.lerobot_convert import is_lerobot_dataset, lerobot_to_minari
    from omnigym.platform.episodes.minari_convert import recording_to_minari

    convert: Callable[[str, str], DatasetSummary]
    if (Path(dataset) / MANIFEST).is_file():
        convert = recording_to_minari
    elif is_lerobot_dataset(dataset):
        convert = lerobot_to_minari
    else:
        yield dataset
        return
    previous = os.environ.get("MINARI_DATASETS_PATH")
    with tempfile.TemporaryDirectory(prefix="omnigym-bc-") as tmp:
        os.environ["MINARI_DATASETS_PATH"] = tmp  # the user's datasets stay untouched
        try:
            yield convert(dataset, "omnigym/converted-v0").dataset_id
        finally:
            if previous is None:
                os.environ.pop("MINARI_DATASETS_PATH", None)
            else:
                os.environ["MINARI_DATASETS_PATH"] = previous


def _cmd_datasets_export(args: argparse.Namespace) -> int:
    if args.format == "lerobot":
        from omnigym.platform.episodes.lerobot_convert import minari_to_lerobot

        out = minari_to_lerobot(args.dataset_id, args.out, fps=args.fps, task=args.task)
        print(f"wrote {args.dataset_id} as a LeRobot dataset in {out} (LeRobotDataset(repo_id, root={out}))")
        return 0
    from omnigym.platform.episodes.minari_convert import minari_to_recording

    out = minari_to_recording(args.dataset_id, args.out)
    print(f"wrote {args.dataset_id} as an episode recording in {out} (watch it: omnigym view {out})")
    return 0


def _cmd_datasets_import(args: argparse.Namespace) -> int:
    from omnigym.platform.episodes.lerobot_convert import is_lerobot_dataset, lerobot_to_minari
    from omnigym.platform.episodes.minari_convert import recording_to_minari

    source_format = args.format or ("lerobot" if is_lerobot_dataset(args.source) else "recording")
    if source_format == "lerobot":
        summary = lerobot_to_minari(args.source, args.dataset_id, env_id=args.env)
    else:
        if args.env:
            raise UsageError("--env is for LeRobot datasets; a recording names its env itself")
        summary = recording_to_minari(args.source, args.dataset_id)
    print(
        f"wrote Minari dataset {summary.dataset_id}: {summary.episodes} episodes, {summary.steps} steps, "
        f"mean return {summary.mean_return:.3f} ({summary.path})"
    )
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``datasets``, ``vlm`` and ``bc`` commands."""
    datasets = sub.add_parser(
        "datasets", help="generate D4RL-style offline datasets locally; convert datasets and recordings"
    )
    datasets_sub = datasets.add_subparsers(dest="datasets_command", required=True, metavar="DATASETS_COMMAND")
    make = datasets_sub.add_parser(
        "make", help="make recipe datasets, e.g. hopper-medium (trains and caches a SAC behaviour policy)"
    )
    make.add_argument(
        "names", nargs="+", metavar="TASK-KIND",
        help="task: halfcheetah, hopper, walker2d; kind: random, medium(-replay), expert, medium-expert",
    )  # fmt: skip
    make.add_argument(
        "--quick", action="store_true", help="small datasets, short SAC runs (own ids: ...-quick-v0)"
    )
    make.set_defaults(func=_cmd_datasets_make)
    export = datasets_sub.add_parser(
        "export",
        help="write a Minari dataset in another format (recording: omnigym's episode format; lerobot)",
    )
    export.add_argument("dataset_id", help="Minari dataset id, e.g. omnigym/pusht-expert-v0")
    export.add_argument(
        "--format", choices=["recording", "lerobot"], default="recording",
        help="the target format (default recording; lerobot: LeRobot's v3.0 dataset, docs/episodes.md)",
    )  # fmt: skip
    export.add_argument("--out", required=True, metavar="DIR", help="a new directory to write into")
    export.add_argument(
        "--fps",
        type=int,
        default=None,
        help="lerobot: frames per second (default: the env's render_fps, else 10)",
    )
    export.add_argument(
        "--task",
        default=None,
        help="lerobot: the instruction, for envs without a text observation (default: the env id)",
    )
    export.set_defaults(func=_cmd_datasets_export)
    import_ = datasets_sub.add_parser("import", help="make a Minari dataset from another format")
    import_.add_argument(
        "source",
        metavar="DIR",
        help="an episode recording (omnigym eval --record DIR) or a LeRobot dataset's root",
    )
    import_.add_argument(
        "--format", choices=["recording", "lerobot"], default=None,
        help="the source format (default: lerobot where DIR holds meta/info.json, else recording)",
    )  # fmt: skip
    import_.add_argument("--dataset-id", required=True, help="the new Minari dataset's id")
    import_.add_argument(
        "--env", default=None, help="lerobot: the env id the data fits, for a dataset made outside omnigym"
    )
    import_.set_defaults(func=_cmd_datasets_import)

    vlm = sub.add_parser("vlm", help="vision-language-model utilities")
    vlm_sub = vlm.add_subparsers(dest="vlm_command", required=True, metavar="VLM_COMMAND")
    make_tiny = vlm_sub.add_parser(
        "make-tiny", help="build a tiny random VLM + a locally trained tokenizer + processor (offline tests)"
    )
    make_tiny.add_argument("--arch", required=True, choices=["qwen2_vl", "qwen2_5_vl", "idefics3", "qwen2"])
    make_tiny.add_argument("--out", required=True, help="directory to save_pretrained into")
    make_tiny.add_argument("--seed", type=int, default=0, help="weight and tokenizer seed (default 0)")
    make_tiny.set_defaults(func=_cmd_vlm)
    sft = vlm_sub.add_parser(
        "sft", help="supervised fine-tuning on a Minari dataset of text actions (e.g. an oracle's)"
    )
    sft.add_argument("--dataset", required=True, help="Minari dataset id (omnigym collect ...)")
    sft.add_argument("--out", required=True, help="directory for the fine-tuned policy (and its hf/ model)")
    sft.add_argument("--steps", type=int, default=200, help="optimiser steps (default 200)")
    sft.add_argument("--batch-size", type=int, default=32, help="demonstrations per step (default 32)")
    sft.add_argument(
        "--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3; real VLMs ~1e-5)"
    )
    sft.add_argument("--seed", type=int, default=0, help="minibatch order (default 0)")
    sft.add_argument("--all-episodes", action="store_true", help="also learn from unsuccessful episodes")
    sft.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:1, ...")
    sft.add_argument(
        "--eval-episodes", type=int, default=0, help="then evaluate on the dataset's env (default 0: no)"
    )
    sft.add_argument("--eval-seed", type=int, default=10_000, help="first evaluation seed (default 10000)")
    sft.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE",
        help="policy config over configs/policy/vlm.yaml, e.g. model=tiny:idefics3 max_new_tokens=8",
    )  # fmt: skip
    sft.set_defaults(func=_cmd_vlm_sft)

    bc = sub.add_parser(
        "bc",
        help="imitation-train an action-chunk policy (diffusion, flow, meanflow, vla, planners) on a dataset",
    )
    bc.add_argument(
        "--dataset", required=True,
        help="Minari dataset id (omnigym collect ...), an episode recording (eval --record DIR) "
        "or a LeRobot dataset's root",
    )  # fmt: skip
    bc.add_argument(
        "--policy", required=True,
        help="diffusion, flow, meanflow, vla, diffusion_planner or hierarchical_diffusion_planner",
    )  # fmt: skip
    bc.add_argument("--out", required=True, help="directory to save the trained policy in")
    bc.add_argument("--steps", type=int, default=1000, help="optimiser steps (default 1000)")
    bc.add_argument("--batch-size", type=int, default=64, help="demonstration windows per step (default 64)")
    bc.add_argument("--lr", type=float, default=1e-4, help="AdamW peak learning rate (default 1e-4)")
    bc.add_argument("--seed", type=int, default=0, help="initialisation and window order (default 0)")
    bc.add_argument("--log-every", type=int, default=100, help="steps between log lines (default 100)")
    bc.add_argument(
        "--eval-every", type=int, default=0, help="steps between evaluations (default 0: at the end)"
    )
    bc.add_argument(
        "--eval-episodes",
        type=int,
        default=0,
        help="episodes per evaluation on the dataset's env (default 0: none)",
    )
    bc.add_argument("--successful-only", action="store_true", help="learn only from successful episodes")
    bc.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, ...")
    bc.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE",
        help="policy config over configs/policy/<policy>.yaml, e.g. num_inference_steps=5 horizon=8",
    )  # fmt: skip
    bc.set_defaults(func=_cmd_bc)
