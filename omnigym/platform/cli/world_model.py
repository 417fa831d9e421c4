"""``omnigym world-model``: fit, dream, eval."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omnigym.platform.cli.policy_spec import resolve_policy

if TYPE_CHECKING:
    from omnigym.core.policy import Policy
    from omnigym.platform.buffers import ReplayBuffer


def _real_transitions(
    args: argparse.Namespace,
    obs_space: Any,
    act_space: Any,
    *,
    policy: Policy | None = None,
    dataset_id: str | None = None,
) -> ReplayBuffer:
    """The real data of ``--dataset ID``, or ``--collect STEPS`` fresh steps (kept as a Minari dataset).

    ``policy`` None collects with uniform random actions.
    """
    from omnigym.platform.trainers import model_based as mb
    from omnigym.platform.trainers.offline import load_dataset_buffer

    if (args.dataset is None) == (args.collect is None):
        raise SystemExit("give exactly one of --dataset ID and --collect STEPS")
    if args.dataset is not None:
        return load_dataset_buffer(args.dataset, obs_space, act_space)
    dataset_id = dataset_id or mb.default_dataset_id(f"{args.env}_{Path(args.out).name}")
    real = mb.collect_real_data(args.env, args.collect, dataset_id, policy=policy, seed=args.seed)
    who = "random " if policy is None else ""
    print(f"collected {len(real)} {who}real steps of {args.env} as dataset {dataset_id}", file=sys.stderr)
    return real


def _cmd_world_model_fit(args: argparse.Namespace) -> int:
    from omnigym.core.config import apply_overrides, build_dataclass, load_yaml
    from omnigym.core.registry import WORLD_MODELS
    from omnigym.platform.experiment import config_dir
    from omnigym.platform.seeding import seed_everything
    from omnigym.platform.trainers import model_based as mb
    from omnigym.platform.vec_env import WorldModelEnvConfig

    if args.dataset is not None and args.policy is not None:
        raise SystemExit("world-model fit: --policy chooses who collects; it needs --collect, not --dataset")
    out = Path(args.out)
    obs_space, act_space = mb._env_spaces(args.env)
    seed_everything(args.seed)
    policy = resolve_policy(args.policy, args.env) if args.policy not in (None, "random") else None
    real = _real_transitions(args, obs_space, act_space, policy=policy, dataset_id=args.dataset_id)
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

    from omnigym.core.config import apply_overrides, build_dataclass, load_yaml
    from omnigym.platform.experiment import config_dir
    from omnigym.platform.seeding import seed_everything
    from omnigym.platform.trainers import model_based as mb
    from omnigym.world_models.imagination import ImaginationConfig, train_dreamer
    from omnigym.world_models.rssm import RSSMConfig

    out = Path(args.out)
    obs_space, act_space = mb._env_spaces(args.env)
    seed_everything(args.seed)
    real = _real_transitions(args, obs_space, act_space)
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
    from omnigym.platform.vec_env import WorldModelEnvConfig
    from omnigym.policies.baselines import RandomPolicy
    from omnigym.world_models.fidelity import FidelityReport

    model_dir = Path(args.model)
    env_id = _model_env_id(model_dir, args.env)
    report = FidelityReport.load(model_dir)
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
    if report.rank_caveat is not None:  # also in fidelity.json/.md; said again where it is seen
        print(f"world-model eval: Spearman {rho:.3f} is {report.rank_caveat}", file=sys.stderr)
    return 0


def _model_env_id(model_dir: Path, env: str | None) -> str:
    """The real env of a saved world model: ``--env``, else the one its fidelity report names."""
    from omnigym.world_models.fidelity import FidelityReport

    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} is not a saved world model (no config.json)")
    report = FidelityReport.load(model_dir)
    env_id = env or (report.env_id if report is not None else None)
    if env_id is None:
        raise SystemExit(f"{model_dir} has no fidelity.json naming its env; pass --env")
    return env_id


def _cmd_world_model_replay(args: argparse.Namespace) -> int:
    from omnigym.platform.world_model_replay import replay_in_world_model

    model_dir = Path(args.model)
    env_id = _model_env_id(model_dir, args.env)
    policy = resolve_policy(args.policy, env_id)
    summary = replay_in_world_model(
        model_dir, env_id, policy, args.out, episodes=args.episodes, seed=args.seed, agent_name=args.policy,
        model_env_kwargs={"reward": args.reward, "termination": args.termination},
    )  # fmt: skip
    for i, (error, real, model) in enumerate(
        zip(summary.obs_error, summary.real_returns, summary.model_returns, strict=True)
    ):
        print(f"episode {i}: mean obs error {error:.4g}, return real {real:.2f} / model {model:.2f}")
    print(f"recordings: {summary.real} and {summary.model}")
    print(f"side by side: omnigym view {summary.real} {summary.model}")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``world-model`` command group."""
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
    replay = wm_sub.add_parser(
        "replay", help="record a policy in the real env and its actions replayed in the model, to compare"
    )
    replay.add_argument("model", help="a saved world model folder (world-model fit --out)")
    replay.add_argument("--policy", default="random", help="who acts in the real env (default random)")
    replay.add_argument("--env", help="the real env (default: the one in the model's fidelity.json)")
    replay.add_argument("--out", required=True, help="a new folder for the real/ and model/ recordings")
    replay.add_argument("--episodes", type=int, default=3, help="episodes (default 3)")
    replay.add_argument("--seed", type=int, default=0, help="episode i uses seed + i (both envs)")
    replay.add_argument("--reward", choices=["learned", "known"], default="learned", help="model reward")
    replay.add_argument(
        "--termination", choices=["learned", "known"], default="learned", help="model termination"
    )
    replay.set_defaults(func=_cmd_world_model_replay)
