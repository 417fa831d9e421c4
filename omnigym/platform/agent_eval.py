"""Agent evaluation: several agents over a suite of envs, and the table an agent paper reports.

For each (agent, env) pair: success rate, mean steps per episode, invalid-action rate (steps whose
``info["action_valid"]`` was False), action parts per step (generated tokens for a language-model
policy, 1 for a one-part action), wall time and steps per second, over the same seeded episodes.
Reference rows come for free: ``oracle`` (the env family's scripted solver: ``gui_oracle``,
``game_solver``) and ``random`` (uniformly random *well-formed* actions: a random click on the
screen, a random word of the game's vocabulary, a random index), so a learned agent's numbers
have a floor and a ceiling beside them. ``omnigym eval-agent`` is the command.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from omnigym.envs.games.experts import action_words
from omnigym.platform.evaluate import ActionFn, evaluate_policy
from omnigym.platform.vec_env import make_env
from omnigym.policies.base import Policy, obs_to_torch

GAME_IDS = (
    "omnigym/Sokoban-v0", "omnigym/Maze-v0", "omnigym/FrozenLake-v0", "omnigym/NumberLine-v0",
    "omnigym/EZPoints-v0", "omnigym/Points24-v0", "omnigym/Blackjack-v0",
)  # fmt: skip
REFERENCE_AGENTS = ("oracle", "random")
"""Agents every table includes unless asked not to."""


def suite_env_ids(suite: str) -> list[str]:
    """The env ids of a suite.

    ``gui``: the twelve synthetic GUI families; ``games``: the games with solvers; otherwise a
    comma-separated list of env ids.
    """
    if suite == "gui":
        from omnigym.envs.gui.families import FAMILIES

        return [f"omnigym/GUI-{family}-v0" for family in FAMILIES]
    if suite == "games":
        return list(GAME_IDS)
    ids = [part.strip() for part in suite.split(",") if part.strip()]
    if not ids:
        raise ValueError("--suite must be 'gui', 'games' or a comma-separated list of env ids")
    return ids


def suite_env_kwargs(env_id: str, game_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """How the suite makes an env: games answer in text, like the GUI envs (a language agent's view).

    ``game_kwargs`` are further options for the games (e.g. ``{"instructions": False}`` for agents
    trained on the state alone); GUI envs take none.
    """
    return {"action_space": "text", **(game_kwargs or {})} if env_id in GAME_IDS else {}


@dataclass
class AgentResult:
    """One agent on one env."""

    agent: str
    env_id: str
    episodes: int
    success_rate: float
    mean_steps: float
    invalid_action_rate: float
    parts_per_step: float
    seconds: float
    steps_per_s: float
    error: str = ""
    """Why the agent could not run on this env (then every figure is NaN)."""


class CountingAgent:
    """A policy as an evaluation action function that counts the action parts it produces."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.steps = 0
        self.parts = 0.0

    def __call__(self, obs: dict[str, np.ndarray]) -> Any:
        """The policy's deterministic actions for a batch (NumPy, or a list of strings)."""
        with torch.inference_mode():
            step = self.policy.act(obs_to_torch(obs, self.policy.device), deterministic=True)
        self.steps += int(step.mask.shape[0])
        self.parts += float(step.mask.sum())
        return step.action.cpu().numpy() if isinstance(step.action, torch.Tensor) else step.action


def random_agent(env_id: str, env_kwargs: dict[str, Any], seed: int = 0) -> ActionFn:
    """Uniformly random well-formed actions for ``env_id``.

    Text envs: a click anywhere on the screenshot (GUI) or a random word of the game's vocabulary
    (its ``actions:`` line, or its default words without instructions); other action spaces: a
    sample of the space.
    """
    rng = np.random.default_rng(seed)
    env = make_env(env_id, **env_kwargs)
    space = env.action_space
    env.close()
    if not isinstance(space, spaces.Text):
        space.seed(seed)
        return lambda obs: np.stack([space.sample() for _ in range(len(next(iter(obs.values()))))])

    def act(obs: dict[str, Any]) -> list[str]:
        texts = list(obs["text"])
        if "image" in obs and not texts[0].startswith("game: "):  # a GUI screen: click somewhere on it
            height, width = obs["image"].shape[1:3]
            return [f"click({rng.integers(width)}, {rng.integers(height)})" for _ in texts]
        return [str(rng.choice(action_words(text))) for text in texts]

    return act


def oracle_agent(env_id: str, env_kwargs: dict[str, Any]) -> Policy:
    """The env family's scripted solver (``gui_oracle`` for GUI envs, ``game_solver`` for games)."""
    from omnigym.platform.registry import POLICIES

    name = "gui_oracle" if env_id.startswith("omnigym/GUI-") else "game_solver"
    cls = POLICIES.get(name)
    env = make_env(env_id, **{**cls.env_kwargs, **env_kwargs})
    try:
        return cls(cls.config_class(), env.observation_space, env.action_space)
    finally:
        env.close()


AgentFactory = Callable[[str, dict[str, Any]], Any]
"""Builds an agent (a Policy or an action function) for ``(env_id, env_kwargs)``."""


def evaluate_agents(
    agents: dict[str, AgentFactory], env_ids: list[str], episodes: int, seed: int = 0,
    video_dir: Path | None = None, game_kwargs: dict[str, Any] | None = None,
) -> list[AgentResult]:  # fmt: skip
    """Every agent on every env over the same seeded episodes."""
    results = []
    for env_id in env_ids:
        env_kwargs = suite_env_kwargs(env_id, game_kwargs)
        for name, factory in agents.items():
            video = video_dir / f"{name}-{env_id.replace('/', '_')}.mp4" if video_dir else None
            start = time.perf_counter()
            try:
                agent = factory(env_id, env_kwargs)
                counting = CountingAgent(agent) if isinstance(agent, Policy) else None
                result = evaluate_policy(
                    counting or agent, env_id, episodes=episodes, seed=seed, env_kwargs=env_kwargs,
                    video_path=video,
                )  # fmt: skip
            except (TypeError, ValueError, FileNotFoundError) as exc:
                # e.g. a game solver on a GUI env, or a prompt longer than a VLM's max_prompt_tokens
                nan = float("nan")
                results.append(AgentResult(name, env_id, 0, nan, nan, nan, nan, 0.0, nan, error=str(exc)))
                continue
            seconds = time.perf_counter() - start
            summary = result.summary()
            steps = float(np.sum(result.lengths))
            invalid = float(np.nansum(result.metrics.get("invalid_actions", [0.0])))
            results.append(
                AgentResult(
                    agent=name, env_id=env_id, episodes=len(result.returns),
                    success_rate=summary.get("success_rate", float("nan")),
                    mean_steps=summary["length_mean"], invalid_action_rate=invalid / max(steps, 1.0),
                    parts_per_step=counting.parts / max(counting.steps, 1) if counting else 1.0,
                    seconds=seconds, steps_per_s=steps / max(seconds, 1e-9),
                )
            )  # fmt: skip
    return results


def results_markdown(results: list[AgentResult]) -> str:
    """One row per (agent, env), then one summary row per agent (means over the suite)."""
    header = "| agent | env | episodes | success | mean steps | invalid actions | parts/step | seconds |"
    lines = [header, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        if r.error:
            lines.append(f"| {r.agent} | {r.env_id} | - | - | - | - | - | error: {r.error[:80]} |")
            continue
        lines.append(
            f"| {r.agent} | {r.env_id} | {r.episodes} | {r.success_rate:.2f} | {r.mean_steps:.1f} | "
            f"{r.invalid_action_rate:.2f} | {r.parts_per_step:.1f} | {r.seconds:.2f} |"
        )
    lines += [
        "",
        "| agent | envs | mean success | mean steps | mean invalid actions |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for agent in dict.fromkeys(r.agent for r in results):
        rows = [r for r in results if r.agent == agent and not r.error]
        if not rows:
            continue
        success = np.nanmean([r.success_rate for r in rows])
        steps, invalid = np.mean([r.mean_steps for r in rows]), np.mean([r.invalid_action_rate for r in rows])
        lines.append(f"| {agent} | {len(rows)} | {success:.2f} | {steps:.1f} | {invalid:.2f} |")
    return "\n".join(lines) + "\n"


def write_results(results: list[AgentResult], out: Path) -> tuple[Path, Path]:
    """``results.md`` and ``results.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    markdown, data = out / "results.md", out / "results.json"
    markdown.write_text(results_markdown(results))
    data.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return markdown, data
