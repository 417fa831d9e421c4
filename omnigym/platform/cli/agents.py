"""``omnigym eval-agent``: agents scored over a suite of envs, beside reference rows."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

from omnigym.platform.cli.policy_spec import json_kwargs, resolve_policy


def _cmd_eval_agent(args: argparse.Namespace) -> int:
    from omnigym.platform.agent_eval import (
        REFERENCE_AGENTS,
        SharedAgent,
        WarningTally,
        evaluate_agents,
        reference_agents,
        results_markdown,
        suite_env_ids,
        write_results,
    )
    from omnigym.platform.vec_env import EnvArgumentError

    policy_kwargs = vlm_policy_kwargs(args.policy_kwargs)
    if args.suite == "miniwob":
        _check_browser()
    agents: dict[str, Any] = {}
    if not args.no_reference:
        agents.update(reference_agents(args.suite, args.seed))
    for spec in args.policy or []:
        if spec in agents or spec in REFERENCE_AGENTS:
            continue
        # built once on the first env, reused while the spaces stay the same (a VLM loads once)
        agents[spec] = SharedAgent(functools.partial(_resolve, spec, policy_kwargs=policy_kwargs))
    if not agents:
        raise SystemExit("eval-agent: no agent to evaluate (give --policy, or drop --no-reference)")
    video_dir = Path(args.out) / "videos" if args.video else None
    if args.record and Path(args.record).exists() and any(Path(args.record).iterdir()):
        raise SystemExit(f"eval-agent: {args.record} is not empty; pick a new --record directory")
    game_kwargs = json_kwargs(args.game_kwargs)
    with WarningTally() as tally:
        try:
            results = evaluate_agents(
                agents,
                suite_env_ids(args.suite),
                args.episodes,
                args.seed,
                video_dir,
                game_kwargs=game_kwargs,
                record_dir=Path(args.record) if args.record else None,
            )
        except EnvArgumentError as exc:  # an unknown env id in the suite
            raise SystemExit(exc.describe(id_flag="--suite", kwargs_flag="--game-kwargs")) from None
    markdown, data = write_results(results, Path(args.out))
    print(results_markdown(results))
    print(f"wrote {markdown} and {data}")
    summary = tally.summary()
    if summary:
        print(f"eval-agent: {summary}", file=sys.stderr)
    return 0


def _check_browser() -> None:
    """Stop with one line naming the fix when the MiniWoB++ suite cannot start its browser here.

    Raises:
        SystemExit: ``miniwob`` or headless Chromium is missing.
    """
    from omnigym.envs.gui.miniwob import browser_unavailable_reason

    reason = browser_unavailable_reason()
    if reason is not None:
        raise SystemExit(f"eval-agent --suite miniwob: cannot start MiniWoB++: {reason}")


def _resolve(spec: str, env_id: str, env_kwargs: dict[str, Any], *, policy_kwargs: dict | None) -> Any:
    """``resolve_policy`` as an agent factory (module level, so tests can count its calls)."""
    return resolve_policy(spec, env_id, env_kwargs, policy_kwargs=policy_kwargs)


def vlm_policy_kwargs(text: str | None) -> dict[str, Any] | None:
    """``--policy-kwargs``: ``vlm`` policy config keys for agents built from model ids or dirs.

    Checked against :class:`VLMPolicyConfig` before anything runs, so a typo is a one-line error
    naming the valid keys. ``temperature: 0`` means greedy decoding, which is how eval-agent acts
    anyway (the config itself wants a positive sampling temperature), so it is accepted and dropped.

    Raises:
        SystemExit: not a JSON object, an unknown key, or a value of the wrong type.
    """
    if not text:
        return None
    from omnigym.core.config import ConfigError, build_dataclass
    from omnigym.policies.vlm.policy import VLMPolicyConfig

    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(
            f"--policy-kwargs must be a JSON object, e.g. '{{\"max_new_tokens\": 8}}': {exc}"
        ) from exc
    if not isinstance(kwargs, dict):
        raise SystemExit(f"--policy-kwargs must be a JSON object, got {type(kwargs).__name__}")
    if kwargs.get("temperature") == 0:
        kwargs.pop("temperature")
    try:
        checked = build_dataclass(VLMPolicyConfig, {"model": "check", **kwargs}, path="policy_kwargs")
    except ConfigError as exc:
        raise SystemExit(f"--policy-kwargs: {exc}") from exc
    return {key: getattr(checked, key) for key in kwargs}  # converted: JSON lists become tuples, ...


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``eval-agent`` command."""
    agent_eval = sub.add_parser(
        "eval-agent", help="evaluate agents over a suite of envs (success, steps, invalid actions, tokens)"
    )
    agent_eval.add_argument(
        "--policy", action="append", metavar="SPEC",
        help="an agent: registered policy name or saved policy dir (repeat for several)",
    )  # fmt: skip
    agent_eval.add_argument(
        "--suite", required=True,
        help="gui, miniwob (real MiniWoB++ tasks in headless Chromium), games, driving, manipulation, "
        "or a comma-separated list of env ids",
    )  # fmt: skip
    agent_eval.add_argument("--episodes", type=int, default=20, help="episodes per env (default 20)")
    agent_eval.add_argument("--seed", type=int, default=0, help="episode i uses seed + i (default 0)")
    agent_eval.add_argument(
        "--out", default="agent_eval", help="results.md/.json go here (default agent_eval/)"
    )
    agent_eval.add_argument(
        "--no-reference", action="store_true",
        help="no reference rows (oracle and random; driving: pdm_closed and constant_velocity)",
    )  # fmt: skip
    agent_eval.add_argument("--video", action="store_true", help="record each agent's first episode per env")
    agent_eval.add_argument(
        "--record", default=None, metavar="DIR",
        help="write every episode as episode recordings in DIR/<agent>-<env> (docs/episodes.md)",
    )  # fmt: skip
    agent_eval.add_argument(
        "--game-kwargs", default=None,
        help='JSON env options for the games, e.g. \'{"instructions": false}\' (state-only text)',
    )  # fmt: skip
    agent_eval.add_argument(
        "--policy-kwargs", default=None, metavar="JSON",
        help='vlm policy options for agents given as model ids or dirs, e.g. '
        '\'{"max_new_tokens": 8, "max_prompt_tokens": 1024}\' (keys of configs/policy/vlm.yaml)',
    )  # fmt: skip
    agent_eval.set_defaults(func=_cmd_eval_agent)
