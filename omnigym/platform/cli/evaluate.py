"""``omnigym eval`` and ``omnigym collect``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from omnigym.platform.cli.policy_spec import env_flags, json_kwargs, resolve_policy, run_env_settings


@env_flags
def _cmd_eval(args: argparse.Namespace) -> int:
    from omnigym.platform.evaluate import evaluate_policy, format_summary

    cli_kwargs = json_kwargs(args.env_kwargs)
    policy = resolve_policy(args.policy, args.env, cli_kwargs)
    env_kwargs, max_episode_steps = run_env_settings(Path(args.policy), args.env)
    env_kwargs = {**(env_kwargs or {}), **cli_kwargs}
    video_path = None
    if args.video:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        video_path = Path(args.video_dir) / f"{args.env.replace('/', '_')}-{stamp}.mp4"
    result = evaluate_policy(
        policy, args.env, episodes=args.episodes, seed=args.seed, deterministic=not args.stochastic,
        env_kwargs=env_kwargs, max_episode_steps=max_episode_steps, video_path=video_path,
        video_episodes=args.video_episodes, record_dir=args.record, agent_name=args.policy,
        num_envs=args.num_envs,
    )  # fmt: skip
    summary = result.summary()
    if args.json:
        if result.video_path:
            summary["video"] = str(result.video_path)  # type: ignore[assignment]
            summary["videos"] = [str(p) for p in result.video_paths]  # type: ignore[assignment]
        if args.record:
            summary["recording"] = str(args.record)  # type: ignore[assignment]
        print(json.dumps(summary))
    else:
        print(f"{args.policy} on {args.env}, {args.episodes} episodes from seed {args.seed}:")
        print(format_summary(summary))
        for path in result.video_paths:
            print(f"video: {path}")
        if args.record:
            print(f"episodes recorded in {args.record} (watch them: omnigym view {args.record})")
    return 0


@env_flags
def _cmd_collect(args: argparse.Namespace) -> int:
    from omnigym.platform.datasets import PolicySource, PolicySpec, collect_dataset, parse_policy_mix
    from omnigym.platform.episodes.format import MANIFEST, RecordingError
    from omnigym.policies.baselines import RandomPolicy

    if args.record and (Path(args.record) / MANIFEST).exists():  # refused before any episode runs
        raise RecordingError(f"{args.record} already holds a recording; pick a new directory")
    env_kwargs = json_kwargs(args.env_kwargs)
    # A saved policy's path is one spec even if it holds a comma.
    entries = [PolicySpec(args.policy)] if Path(args.policy).exists() else parse_policy_mix(args.policy)
    sources = []
    for entry in entries:
        policy = resolve_policy(entry.spec, args.env, env_kwargs)
        if entry.mode is None:  # random's mode is the box centre: as data it samples unless told
            stochastic = args.stochastic or isinstance(policy, RandomPolicy)
        else:
            stochastic = entry.mode == "stochastic"
        label = f"{entry.spec}:stochastic" if stochastic else entry.spec
        sources.append(PolicySource(policy, entry.fraction, deterministic=not stochastic, label=label))
    summary = collect_dataset(
        sources, args.env, args.dataset_id, episodes=args.episodes, seed=args.seed, env_kwargs=env_kwargs,
        jpeg_images=args.jpeg_images,
    )  # fmt: skip
    success = "" if summary.success_rate is None else f", success rate {summary.success_rate:.3f}"
    print(
        f"wrote Minari dataset {summary.dataset_id}: {summary.episodes} episodes, {summary.steps} steps, "
        f"mean return {summary.mean_return:.3f}{success} ({summary.path})"
    )
    if len(summary.episodes_per_policy) > 1:
        print("episodes per policy: " + ", ".join(f"{k} {v}" for k, v in summary.episodes_per_policy.items()))
    if args.record:
        from omnigym.platform.episodes.minari_convert import minari_to_recording

        minari_to_recording(summary.dataset_id, args.record)
        print(f"episodes recorded in {args.record} (watch them: omnigym view {args.record})")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``eval`` and ``collect`` commands."""
    evaluate = sub.add_parser("eval", help="evaluate a policy on an env")
    evaluate.add_argument(
        "--policy", required=True, help="registered policy name, saved policy, checkpoint or run dir"
    )
    evaluate.add_argument("--env", required=True, help="Gymnasium env id, e.g. CartPole-v1 or omnigym/...")
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run (default 10)")
    evaluate.add_argument("--seed", type=int, default=0, help="episode i uses seed + i (default 0)")
    evaluate.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    evaluate.add_argument(
        "--num-envs", type=int, default=8, metavar="N",
        help="most episodes run side by side, each in its own env (default 8; a browser task starts "
        "a Chromium per env)",
    )  # fmt: skip
    evaluate.add_argument(
        "--env-kwargs", default=None, help='JSON keyword arguments for the env, e.g. \'{"split": "test"}\''
    )
    evaluate.add_argument("--video", action="store_true", help="record whole episodes as MP4 files")
    evaluate.add_argument("--video-dir", default="videos", help="where --video writes (default videos/)")
    evaluate.add_argument(
        "--video-episodes", type=int, default=1, metavar="N",
        help="with --video: record the first N episodes, each whole in its own MP4 (default 1)",
    )  # fmt: skip
    evaluate.add_argument(
        "--record", default=None, metavar="DIR",
        help="write every episode step by step to DIR (a new episode recording, docs/episodes.md) "
        "for omnigym view",
    )  # fmt: skip
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.set_defaults(func=_cmd_eval)

    collect = sub.add_parser("collect", help="record a policy's episodes as a Minari dataset")
    collect.add_argument(
        "--policy", required=True,
        help="registered policy name, saved policy or run dir; or a mix SPEC[:MODE]:FRACTION,... "
        "(MODE deterministic or stochastic), e.g. pusht_expert:0.7,random:0.3",
    )  # fmt: skip
    collect.add_argument("--env", required=True, help="Gymnasium env id")
    collect.add_argument("--dataset-id", required=True, help="Minari dataset id, e.g. omnigym/driving-pdm-v0")
    collect.add_argument("--episodes", type=int, default=10, help="episodes to record (default 10)")
    collect.add_argument("--seed", type=int, default=0, help="episode i uses seed + i (default 0)")
    collect.add_argument(
        "--stochastic", action="store_true",
        help="sample actions instead of the mode (experts add their noise); random always samples",
    )  # fmt: skip
    collect.add_argument("--env-kwargs", default=None, help="JSON keyword arguments for the env")
    collect.add_argument(
        "--jpeg-images", action="store_true",
        help="store image observations JPEG-encoded (smaller, lossy); default: exactly as rendered",
    )  # fmt: skip
    collect.add_argument(
        "--record", default=None, metavar="DIR",
        help="also write the episodes to DIR as an episode recording (docs/episodes.md) for omnigym view",
    )  # fmt: skip
    collect.set_defaults(func=_cmd_collect)
