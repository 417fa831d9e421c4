"""The ``omnigym`` command: train, eval, list, demo, bench."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omnigym.platform.config import ConfigError
from omnigym.platform.experiment import REPO_ROOT

if TYPE_CHECKING:
    from omnigym.policies.base import Policy

BENCH_DIR = REPO_ROOT / "bench"


def _cmd_train(args: argparse.Namespace) -> int:
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers import build_trainer
    from omnigym.platform.trainers.on_policy import load_run_config, new_run_dir

    if args.seeds:
        if args.resume or not args.experiment:
            raise SystemExit("train --seeds: name an experiment (and no --resume)")
        return _train_seeds(args)
    if args.resume:
        if args.experiment:
            raise SystemExit("train: give either an experiment or --resume <run dir>, not both")
        run_dir = Path(args.resume)
        trainer = build_trainer(load_run_config(run_dir), run_dir, resume=True)
    else:
        if not args.experiment:
            raise SystemExit("train: name an experiment (see `omnigym list`) or pass --resume <run dir>")
        config = load_experiment(args.experiment, args.overrides)
        trainer = build_trainer(config, new_run_dir(config))
    print(f"run directory: {trainer.run_dir}", file=sys.stderr)
    result = trainer.train()
    _print_result(result.final_eval, result.best_eval)
    return 0


def _train_seeds(args: argparse.Namespace) -> int:
    from omnigym.platform.trainers.seeds import train_seeds

    summary = train_seeds(args.experiment, args.seeds, args.overrides)
    print(f"{len(args.seeds)} seeds, runs under {summary['root']}:")
    for label in ("final_return", "best_return", "final_normalized_score"):
        if label not in summary:
            continue
        a = summary[label]
        mean_ci, iqm_ci = (f"[{a[f'{k}_ci_low']:.2f}, {a[f'{k}_ci_high']:.2f}]" for k in ("mean", "iqm"))
        print(
            f"{label.replace('_', ' ')}: mean {a['mean']:.2f} {mean_ci}  median {a['median']:.2f}"
            f"  IQM {a['iqm']:.2f} {iqm_ci}"
        )
    return 0


def _print_result(final_eval: dict[str, float], best_eval: dict[str, float] | None) -> None:
    from omnigym.platform.evaluate import format_summary

    print("final evaluation (policy at the end of training):")
    print(format_summary(final_eval))
    if best_eval is not None:
        print(f"best evaluation (at step {int(best_eval.get('step', 0))}):")
        print(format_summary(best_eval))


def resolve_policy(spec: str, env_id: str, env_kwargs: dict | None = None) -> Policy:
    """A policy from a registered name, a saved policy, checkpoint or run dir, or a model dir.

    A Hugging Face image-text-to-text model directory becomes a ``vlm`` policy.
    """
    from omnigym.platform.checkpoint import latest_checkpoint
    from omnigym.platform.pretrained import CONFIG_FILE
    from omnigym.platform.registry import POLICIES
    from omnigym.platform.vec_env import make_env
    from omnigym.policies.base import Policy

    path = Path(spec)
    if _is_hf_model_dir(path) or _is_model_id(spec):
        return _language_model_agent(spec, env_id, env_kwargs)
    if path.exists():
        candidates = [path, path / "policy", path / "best_policy"]
        checkpoint = latest_checkpoint(path) if path.is_dir() else None
        if checkpoint is not None:
            candidates.append(checkpoint / "policy")
        for candidate in candidates:
            if (candidate / CONFIG_FILE).is_file():
                return Policy.from_pretrained(candidate)
        raise FileNotFoundError(f"{spec} holds no saved policy (looked for {CONFIG_FILE} in {candidates})")
    if "/" in spec or spec.startswith("."):
        raise FileNotFoundError(f"--policy {spec}: no such file or directory (nor a registered policy name)")
    policy_cls = POLICIES.get(spec)
    env = make_env(env_id, **{**policy_cls.env_kwargs, **(env_kwargs or {})})
    try:
        return policy_cls(policy_cls.config_class(), env.observation_space, env.action_space)
    finally:
        env.close()


def _language_model_agent(model: str, env_id: str, env_kwargs: dict | None) -> Policy:
    """A ``vlm`` policy over a model directory, hub id or ``tiny:`` spec (text only for an LM)."""
    from gymnasium import spaces

    from omnigym.platform.vec_env import make_env
    from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig, resolve_model_class
    from omnigym.policies.vlm.tiny import resolve_model

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        obs_space = env.observation_space
        if not isinstance(obs_space, spaces.Dict):
            raise TypeError(f"{env_id} has no Dict observations for a VLM policy")
        text_only = resolve_model_class(resolve_model(model), "auto") == "causal_lm"
        config = VLMPolicyConfig(model=model, obs_keys=("text",) if text_only else ("image", "text"))
        return VLMPolicy(config, obs_space, env.action_space)
    except OSError as exc:  # transformers' "not a local folder and not a valid model identifier"
        raise FileNotFoundError(
            f"--policy {model}: no such local path, registered policy or loadable Hugging Face model ({exc})"
        ) from exc
    finally:
        env.close()


def _is_model_id(spec: str) -> bool:
    """A ``tiny:ARCH`` spec, or what looks like a hub id (``org/name``) and is no local path."""
    return spec.startswith("tiny:") or (
        not Path(spec).exists() and re.fullmatch(r"[\w.-]+/[\w.-]+", spec) is not None
    )


def _is_hf_model_dir(path: Path) -> bool:
    """A directory holding a Hugging Face model (``config.json`` with a ``model_type``)."""
    config = path / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text())
    except (json.JSONDecodeError, OSError):
        return False
    return isinstance(data, dict) and "model_type" in data and "observation_space" not in data


def _run_env_settings(path: Path, env_id: str) -> tuple[dict | None, int | None]:
    """A run directory's env kwargs and time limit, when it trained on ``env_id``."""
    from omnigym.platform.trainers.on_policy import CONFIG_FILE, load_run_config

    if not (path / CONFIG_FILE).is_file():
        return None, None
    env = load_run_config(path).env
    return (env.kwargs, env.max_episode_steps) if env.id == env_id else (None, None)


def _json_kwargs(text: str | None) -> dict:
    """``--env-kwargs`` parsed: a JSON object."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f'--env-kwargs must be a JSON object, e.g. \'{{"split": "test"}}\': {exc}') from exc
    if not isinstance(value, dict):
        raise SystemExit(f"--env-kwargs must be a JSON object, got {type(value).__name__}")
    return value


def _cmd_eval(args: argparse.Namespace) -> int:
    from omnigym.platform.evaluate import evaluate_policy, format_summary

    cli_kwargs = _json_kwargs(args.env_kwargs)
    policy = resolve_policy(args.policy, args.env, cli_kwargs)
    env_kwargs, max_episode_steps = _run_env_settings(Path(args.policy), args.env)
    env_kwargs = {**(env_kwargs or {}), **cli_kwargs}
    video_path = None
    if args.video:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        video_path = Path(args.video_dir) / f"{args.env.replace('/', '_')}-{stamp}.mp4"
    result = evaluate_policy(
        policy, args.env, episodes=args.episodes, seed=args.seed, deterministic=not args.stochastic,
        env_kwargs=env_kwargs, max_episode_steps=max_episode_steps, video_path=video_path,
    )  # fmt: skip
    summary = result.summary()
    if args.json:
        if result.video_path:
            summary["video"] = str(result.video_path)  # type: ignore[assignment]
        print(json.dumps(summary))
    else:
        print(f"{args.policy} on {args.env}, {args.episodes} episodes from seed {args.seed}:")
        print(format_summary(summary))
        if result.video_path:
            print(f"video: {result.video_path}")
    return 0


def _cmd_collect(args: argparse.Namespace) -> int:
    from omnigym.platform.datasets import PolicySource, PolicySpec, collect_dataset, parse_policy_mix
    from omnigym.policies.baselines import RandomPolicy

    env_kwargs = _json_kwargs(args.env_kwargs)
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
    return 0


def _cmd_eval_agent(args: argparse.Namespace) -> int:
    from omnigym.platform.agent_eval import (
        REFERENCE_AGENTS,
        evaluate_agents,
        oracle_agent,
        random_agent,
        results_markdown,
        suite_env_ids,
        write_results,
    )

    agents: dict[str, Any] = {}
    if not args.no_reference:
        agents["oracle"] = oracle_agent
        agents["random"] = lambda env_id, kwargs: random_agent(env_id, kwargs, args.seed)
    for spec in args.policy or []:
        if spec in REFERENCE_AGENTS:
            continue
        agents[spec] = lambda env_id, kwargs, spec=spec: resolve_policy(spec, env_id, kwargs)
    if not agents:
        raise SystemExit("eval-agent: no agent to evaluate (give --policy, or drop --no-reference)")
    video_dir = Path(args.out) / "videos" if args.video else None
    game_kwargs = _json_kwargs(args.game_kwargs)
    results = evaluate_agents(
        agents, suite_env_ids(args.suite), args.episodes, args.seed, video_dir, game_kwargs=game_kwargs
    )
    markdown, data = write_results(results, Path(args.out))
    print(results_markdown(results))
    print(f"wrote {markdown} and {data}")
    return 0


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

    from omnigym.platform.config import apply_overrides, build_dataclass, load_yaml
    from omnigym.platform.evaluate import evaluate_policy, format_summary
    from omnigym.platform.experiment import config_dir
    from omnigym.policies.vlm.policy import VLMPolicyConfig
    from omnigym.policies.vlm.sft import SFTConfig, finetune_on_dataset

    base = load_yaml(config_dir() / "policy" / "vlm.yaml")
    policy_config = build_dataclass(VLMPolicyConfig, apply_overrides(base, args.overrides), path="policy")
    sft = SFTConfig(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, seed=args.seed)

    def log(step: int, metrics: dict[str, float]) -> None:
        print(
            f"step {step}/{sft.steps}: nll {metrics['train/sft_nll']:.4f} ({metrics['time/elapsed_s']:.0f} s)"
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

    from omnigym.policies.chunking.train import ImitationConfig, imitate_dataset

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
        print(f"step {step}/{config.steps}: {text} ({metrics['time/elapsed_s']:.0f} s)")

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    policy, _ = imitate_dataset(
        args.dataset, args.policy, args.overrides, config, callback=log, device=device
    )
    print(f"{args.policy} policy saved to {policy.save_pretrained(args.out)}")
    return 0


def _cmd_world_model_fit(args: argparse.Namespace) -> int:
    from omnigym.platform.config import apply_overrides, build_dataclass, load_yaml
    from omnigym.platform.experiment import config_dir
    from omnigym.platform.registry import WORLD_MODELS
    from omnigym.platform.seeding import seed_everything
    from omnigym.platform.trainers import model_based as mb
    from omnigym.platform.trainers.offline import load_dataset_buffer
    from omnigym.world_models.env import WorldModelEnvConfig

    if (args.dataset is None) == (args.collect is None):
        raise SystemExit("world-model fit: give exactly one of --dataset ID and --collect STEPS")
    if args.dataset is not None and args.policy is not None:
        raise SystemExit("world-model fit: --policy chooses who collects; it needs --collect, not --dataset")
    out = Path(args.out)
    obs_space, act_space = mb._env_spaces(args.env)
    seed_everything(args.seed)
    if args.dataset is not None:
        real = load_dataset_buffer(args.dataset, obs_space, act_space)
    else:
        policy = None
        if args.policy not in (None, "random"):
            policy = resolve_policy(args.policy, args.env)
        dataset_id = args.dataset_id or mb.default_dataset_id(f"{args.env}_{out.name}")
        real = mb.collect_real_data(args.env, args.collect, dataset_id, policy=policy, seed=args.seed)
        print(f"collected {len(real)} real steps of {args.env} as dataset {dataset_id}", file=sys.stderr)
    defaults_path = config_dir() / "world_model" / f"{args.type}.yaml"
    base = load_yaml(defaults_path) if defaults_path.is_file() else {"type": args.type}
    model_cls = WORLD_MODELS.get(args.type)
    config = build_dataclass(model_cls.config_class, apply_overrides(base, args.set), path="world_model")
    model = model_cls(config, obs_space, act_space)
    train, holdout = mb.split_episodes(real, args.holdout_episodes)
    reward_fn = mb.reward_function(args.env, WorldModelEnvConfig(reward=args.reward))
    settings = mb.FitSettings(max_epochs=args.epochs, batch_size=args.batch_size, seed=args.seed)
    report = mb.fit_and_report(
        model, train, holdout, out, args.env, settings, reward_fn=reward_fn, callback=mb.print_epoch
    )
    print(report.to_markdown())
    print(f"world model saved to {out} (fidelity.json, fidelity.md)")
    return 0


def _cmd_world_model_dream(args: argparse.Namespace) -> int:
    import json

    from omnigym.platform.config import apply_overrides, build_dataclass, load_yaml
    from omnigym.platform.experiment import config_dir
    from omnigym.platform.seeding import seed_everything
    from omnigym.platform.trainers import model_based as mb
    from omnigym.platform.trainers.offline import load_dataset_buffer
    from omnigym.world_models.imagination import ImaginationConfig, train_dreamer
    from omnigym.world_models.rssm import RSSMConfig

    if (args.dataset is None) == (args.collect is None):
        raise SystemExit("world-model dream: give exactly one of --dataset ID and --collect STEPS")
    out = Path(args.out)
    obs_space, act_space = mb._env_spaces(args.env)
    seed_everything(args.seed)
    if args.dataset is not None:
        real = load_dataset_buffer(args.dataset, obs_space, act_space)
    else:
        dataset_id = mb.default_dataset_id(f"{args.env}_{out.name}")
        real = mb.collect_real_data(args.env, args.collect, dataset_id, seed=args.seed)
        print(
            f"collected {len(real)} random real steps of {args.env} as dataset {dataset_id}", file=sys.stderr
        )
    base = load_yaml(config_dir() / "world_model" / "rssm.yaml")
    model_config = build_dataclass(RSSMConfig, apply_overrides(base, args.set), path="world_model")
    every = max(1, args.updates // 10)

    def progress(update: int, metrics: dict[str, float]) -> None:
        if (update + 1) % every == 0:
            shown = " ".join(f"{k} {v:.4g}" for k, v in sorted(metrics.items()) if k.startswith("train/"))
            print(f"imagination update {update + 1}/{args.updates}: {shown}", file=sys.stderr)

    result = train_dreamer(
        args.env,
        real,
        model_config=model_config,
        config=ImaginationConfig(),
        fit_steps=args.fit_steps,
        updates=args.updates,
        eval_episodes=args.episodes,
        seed=args.seed,
        callback=progress,
    )
    result.model.save_pretrained(out / "world_model")
    result.policy.save_pretrained(out / "policy")
    summary = {
        "env": args.env,
        "real_return": result.real_return,
        "random_return": result.random_return,
        "fit": result.fit,
        "seconds": result.seconds,
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    print(
        f"imagination-trained actor: real return {result.real_return:.1f} over {args.episodes} episodes "
        f"(random {result.random_return:.1f}); saved to {out}/policy, the model to {out}/world_model"
    )
    return 0


def _cmd_world_model_eval(args: argparse.Namespace) -> int:
    from omnigym.platform.trainers import model_based as mb
    from omnigym.policies.baselines import RandomPolicy
    from omnigym.world_models.env import WorldModelEnvConfig
    from omnigym.world_models.fidelity import FidelityReport

    model_dir = Path(args.model)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} is not a saved world model (no config.json)")
    report = FidelityReport.load(model_dir)
    env_id = args.env or (report.env_id if report is not None else None)
    if env_id is None:
        raise SystemExit(f"world-model eval: {model_dir} has no fidelity.json naming its env; pass --env")
    if len(args.policies) < 2:
        raise SystemExit("world-model eval: rank at least two --policies")
    ranked = []
    for spec in args.policies:
        policy = resolve_policy(spec, env_id)
        # A random policy's mode is the box centre: ranked as what it is, it samples.
        ranked.append(mb.RankedPolicy(spec, policy, deterministic=not isinstance(policy, RandomPolicy)))
    env_config = WorldModelEnvConfig(reward=args.reward, termination=args.termination)
    rows, rho = mb.rank_policies(
        ranked, model_dir, env_id, episodes=args.episodes, seed=args.seed, env_config=env_config
    )
    report = report or FidelityReport(env_id=env_id, model=str(model_dir))
    report.policies, report.rank_correlation = rows, rho
    report.write(model_dir)
    print(report.to_markdown())
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import omnigym  # noqa: F401  (registers the omnigym envs)
    from omnigym.envs import omnigym_env_ids
    from omnigym.platform.experiment import list_experiments
    from omnigym.platform.registry import ALGORITHMS, POLICIES, WORLD_MODELS

    env_ids = sorted(gym.registry) if args.all_envs else omnigym_env_ids()
    sections = {
        "envs"
        if args.all_envs
        else "envs (omnigym; any Gymnasium id also works, --all-envs lists them)": env_ids,
        "policies": POLICIES.names(),
        "algorithms": ALGORITHMS.names(),
        "world models": WORLD_MODELS.names(),
        "experiments": list_experiments(),
        "benchmarks": list_benchmarks(),
    }
    for title, names in sections.items():
        print(f"{title}:")
        print("\n".join(f"  {n}" for n in names) if names else "  (none yet)")
    return 0


def list_benchmarks() -> list[str]:
    """Benchmark names: the scripts in ``bench/``."""
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if not p.stem.startswith("_"))


def _cmd_bench(args: argparse.Namespace) -> int:
    script = BENCH_DIR / f"{args.name}.py"
    if not script.is_file():
        raise SystemExit(f"unknown benchmark {args.name!r}; known: {', '.join(list_benchmarks())}")
    command = [sys.executable, str(script), *(["--quick"] if args.quick else []), *args.bench_args]
    return subprocess.call(command)


def _cmd_demo(args: argparse.Namespace) -> int:
    from omnigym.platform.demo import run_demo

    report = run_demo(Path(args.out) if args.out else None, overrides=args.overrides)
    print(f"report: {report}")
    return 0


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"seeds are comma-separated integers, e.g. 1,2,3; got {text!r}"
        ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("give at least one seed, e.g. --seeds 1,2,3")
    return seeds


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog="omnigym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser("train", help="train an experiment, or resume a run")
    train.add_argument("experiment", nargs="?", help="experiment name (configs/experiment) or a YAML path")
    train.add_argument(
        "overrides", nargs="*", help="dotted overrides, e.g. algo.learning_rate=1e-3 env=pendulum"
    )
    train.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    train.add_argument(
        "--seeds", type=_seed_list, metavar="S1,S2,...",
        help="train once per seed and aggregate (mean, median, IQM with 95%% bootstrap CIs)",
    )  # fmt: skip
    train.set_defaults(func=_cmd_train)

    evaluate = sub.add_parser("eval", help="evaluate a policy on an env")
    evaluate.add_argument(
        "--policy", required=True, help="registered policy name, saved policy, checkpoint or run dir"
    )
    evaluate.add_argument("--env", required=True, help="Gymnasium env id, e.g. CartPole-v1 or omnigym/...")
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run (default 10)")
    evaluate.add_argument("--seed", type=int, default=0, help="episode i uses seed + i (default 0)")
    evaluate.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    evaluate.add_argument(
        "--env-kwargs", default=None, help='JSON keyword arguments for the env, e.g. \'{"split": "test"}\''
    )
    evaluate.add_argument("--video", action="store_true", help="record the first episode as MP4")
    evaluate.add_argument("--video-dir", default="videos", help="where --video writes (default videos/)")
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
    collect.set_defaults(func=_cmd_collect)

    agent_eval = sub.add_parser(
        "eval-agent", help="evaluate agents over a suite of envs (success, steps, invalid actions, tokens)"
    )
    agent_eval.add_argument(
        "--policy", action="append", metavar="SPEC",
        help="an agent: registered policy name or saved policy dir (repeat for several)",
    )  # fmt: skip
    agent_eval.add_argument("--suite", required=True, help="gui, games, or a comma-separated list of env ids")
    agent_eval.add_argument("--episodes", type=int, default=20, help="episodes per env (default 20)")
    agent_eval.add_argument("--seed", type=int, default=0, help="episode i uses seed + i (default 0)")
    agent_eval.add_argument(
        "--out", default="agent_eval", help="results.md/.json go here (default agent_eval/)"
    )
    agent_eval.add_argument("--no-reference", action="store_true", help="no oracle and random rows")
    agent_eval.add_argument("--video", action="store_true", help="record each agent's first episode per env")
    agent_eval.add_argument(
        "--game-kwargs", default=None,
        help='JSON env options for the games, e.g. \'{"instructions": false}\' (state-only text)',
    )  # fmt: skip
    agent_eval.set_defaults(func=_cmd_eval_agent)

    datasets = sub.add_parser("datasets", help="generate D4RL-style offline datasets locally")
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
        help="imitation-train an action-chunk policy (diffusion, flow, meanflow, planners) on a dataset",
    )
    bc.add_argument("--dataset", required=True, help="Minari dataset id (omnigym collect ...)")
    bc.add_argument(
        "--policy", required=True,
        help="diffusion, flow, meanflow, diffusion_planner or hierarchical_diffusion_planner",
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

    world_model = sub.add_parser("world-model", help="fit a world model on real data; rank policies in it")
    wm_sub = world_model.add_subparsers(
        dest="world_model_command", required=True, metavar="WORLD_MODEL_COMMAND"
    )
    fit = wm_sub.add_parser(
        "fit", help="collect (or load) real data, fit a world model, save it with fidelity.json/.md"
    )
    fit.add_argument("env", help="the real env's Gymnasium id, e.g. Pendulum-v1")
    fit.add_argument("--dataset", help="fit on this Minari dataset of real transitions")
    fit.add_argument("--collect", type=int, metavar="STEPS", help="collect this many real steps first")
    fit.add_argument(
        "--policy", default=None,
        help="who collects: random (default, uniform actions) or a saved policy / run dir (sampling)",
    )  # fmt: skip
    fit.add_argument(
        "--dataset-id", help="Minari id for the collected data (default omnigym-wm/<env>_<out>-v0)"
    )
    fit.add_argument("--out", required=True, help="folder to save the model and its fidelity report in")
    fit.add_argument("--type", default="ensemble", help="registered world model (default ensemble)")
    fit.add_argument("--epochs", type=int, default=100, help="most epochs; early stopping ends sooner (100)")
    fit.add_argument("--batch-size", type=int, default=256, help="transitions per step (default 256)")
    fit.add_argument(
        "--holdout-episodes", type=int, default=1,
        help="real episodes kept out of the fit for the k-step errors (default 1)",
    )  # fmt: skip
    fit.add_argument(
        "--reward", choices=["learned", "known"], default="learned",
        help="k-step reward error of the model's reward or of the env's known reward function",
    )  # fmt: skip
    fit.add_argument("--seed", type=int, default=0, help="collection, split and initialisation (default 0)")
    fit.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE",
        help="world model settings over configs/world_model/<type>.yaml, e.g. num_members=5",
    )  # fmt: skip
    fit.set_defaults(func=_cmd_world_model_fit)
    dream = wm_sub.add_parser(
        "dream",
        help="fit the latent rssm on real data, train an actor-critic only in its imagination, evaluate",
    )
    dream.add_argument("env", help="the real env's Gymnasium id (Box actions), e.g. Pendulum-v1")
    dream.add_argument("--dataset", help="real transitions from this Minari dataset (whole episodes)")
    dream.add_argument("--collect", type=int, metavar="STEPS", help="collect this many random real steps")
    dream.add_argument("--out", required=True, help="folder for policy/, world_model/ and results.json")
    dream.add_argument("--fit-steps", type=int, default=1500, help="world-model optimiser steps (1500)")
    dream.add_argument("--updates", type=int, default=300, help="actor-critic updates in imagination (300)")
    dream.add_argument("--episodes", type=int, default=10, help="real evaluation episodes (10)")
    dream.add_argument("--seed", type=int, default=0, help="collection, fit and imagination (default 0)")
    dream.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE",
        help="rssm settings over configs/world_model/rssm.yaml, e.g. sequence_length=16",
    )  # fmt: skip
    dream.set_defaults(func=_cmd_world_model_dream)
    wm_eval = wm_sub.add_parser(
        "eval", help="evaluate policies in the model and the real env; their rank correlation into the report"
    )
    wm_eval.add_argument("model", help="a saved world model folder (world-model fit --out)")
    wm_eval.add_argument(
        "--policies", nargs="+", required=True, metavar="POLICY",
        help="registered policy names (random), saved policies or run dirs",
    )  # fmt: skip
    wm_eval.add_argument("--episodes", type=int, default=10, help="episodes per policy and env (default 10)")
    wm_eval.add_argument("--seed", type=int, default=1_000_000, help="episode i uses seed + i (both envs)")
    wm_eval.add_argument("--env", help="the real env (default: the one in the model's fidelity.json)")
    wm_eval.add_argument("--reward", choices=["learned", "known"], default="learned", help="model reward")
    wm_eval.add_argument(
        "--termination", choices=["learned", "known"], default="learned", help="model termination"
    )
    wm_eval.set_defaults(func=_cmd_world_model_eval)

    listing = sub.add_parser(
        "list", help="list envs, policies, algorithms, world models, experiments, benchmarks"
    )
    listing.add_argument("--all-envs", action="store_true", help="list every Gymnasium env id")
    listing.set_defaults(func=_cmd_list)

    demo = sub.add_parser("demo", help="the main job: train, evaluate and write a report")
    demo.add_argument("--out", help="run directory (default runs/demo-<timestamp>)")
    demo.add_argument("overrides", nargs="*", help="dotted overrides for the demo experiment")
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser(
        "bench",
        help="run bench/<name>.py (further options go to the script); its last line is one JSON object",
    )
    bench.add_argument("name", help="benchmark name (see `omnigym list`)")
    bench.add_argument("--quick", action="store_true", help="the same measurement, smaller, under a minute")
    bench.set_defaults(func=_cmd_bench, bench_args=[])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``omnigym`` command."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # Overrides may also follow options (`train exp --seeds 1,2 key=value`): argparse leaves them over.
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra and args.command == "bench":  # the benchmark's own options (`--task driving`)
        args.bench_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError, ValueError, KeyError) as exc:
        print(f"omnigym {args.command}: error: {exc}", file=sys.stderr)
        return 2
