"""Agent evaluation: several agents over a suite of envs, and the table an agent paper reports.

For each (agent, env) pair: success rate, mean steps per episode, invalid-action rate (steps whose
``info["action_valid"]`` was False), action parts per step (generated tokens for a language-model
policy, 1 for a one-part action), wall time and steps per second, over the same seeded episodes.
Reference rows come for free: ``oracle`` (the env family's scripted solver: ``gui_oracle``,
``game_solver``) and ``random`` (uniformly random *well-formed* actions: a random click on the
screen, a random word of the game's vocabulary, a random index), so a learned agent's numbers
have a floor and a ceiling beside them. ``omnigym eval-agent`` is the command.

An agent that loads a model (a VLM) is built once per suite: :class:`SharedAgent` reuses it on
every env with the same spaces. Warnings raised while evaluating (a tokenizer's truncation notice
on every prompt) are counted by :class:`WarningTally` and summarised once; an agent that fails on
an env leaves its exception type, message and traceback in ``results.json``.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import gymnasium.error
import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, obs_to_torch
from omnigym.envs.games.experts import action_words
from omnigym.platform.evaluate import ActionFn, evaluate_policy
from omnigym.platform.loggers import TaskProgress
from omnigym.platform.vec_env import EnvArgumentError, make_env

GAME_IDS = (
    "omnigym/Sokoban-v0", "omnigym/Maze-v0", "omnigym/FrozenLake-v0", "omnigym/NumberLine-v0",
    "omnigym/EZPoints-v0", "omnigym/Points24-v0", "omnigym/Blackjack-v0",
)  # fmt: skip
REFERENCE_AGENTS = ("oracle", "random")
"""Agents every GUI or games table includes unless asked not to."""
DRIVING_IDS = ("omnigym/DrivingVLM-v0",)
DRIVING_KWARGS = {"action_space": "text", "split": "test"}
"""How the driving suite makes its envs: text actions (written plans or meta actions), held-out scenes."""
DRIVING_REFERENCE_AGENTS = ("pdm_closed", "constant_velocity")
"""The driving table's reference rows: the rule-based planner (near the top) and NAVSIM's floor."""
MANIPULATION_EXPERTS = {
    "omnigym/ReachPixels-v0": "reach_expert",
    "omnigym/PushCubePixels-v0": "pushcube_expert",
    "omnigym/PickPlacePixels-v0": "pickplace_expert",
    "omnigym/PushTPixels-v0": "pusht_expert",
}
"""The manipulation suite (camera image, state and instruction text) and each task's scripted expert."""
SCORE_METRICS = (
    "pdms", "epdms", "nc", "dac", "ddc", "tlc", "ep", "ttc", "c", "lk", "hc", "ec", "progress",
    "coverage", "distance",
)  # fmt: skip
"""Episode metrics an :class:`AgentResult` keeps: driving's scores, PushT's final coverage, the
other manipulation tasks' final distance to the goal (m); envs without them report none."""


def suite_env_ids(suite: str) -> list[str]:
    """The env ids of a suite.

    ``gui``: the twelve synthetic GUI families; ``miniwob``: their real MiniWoB++ counterparts in
    headless Chromium (``omnigym/MiniWoB-<Task>-v0``); ``games``: the games with solvers;
    ``driving``: the VLM driving env on held-out test scenes; ``manipulation``: the four MuJoCo
    tasks with camera images; otherwise a comma-separated list of env ids.
    """
    if suite == "gui":
        from omnigym.envs.gui.families import FAMILIES

        return [f"omnigym/GUI-{family}-v0" for family in FAMILIES]
    if suite == "miniwob":
        from omnigym.envs.miniwob_ids import miniwob_suite_ids

        return miniwob_suite_ids()
    if suite == "games":
        return list(GAME_IDS)
    if suite == "driving":
        return list(DRIVING_IDS)
    if suite == "manipulation":
        return list(MANIPULATION_EXPERTS)
    ids = [part.strip() for part in suite.split(",") if part.strip()]
    if not ids:
        raise ValueError(
            "--suite must be 'gui', 'miniwob', 'games', 'driving', 'manipulation' or a comma-separated list "
            "of env ids"
        )
    return ids


def suite_env_kwargs(env_id: str, game_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """How the suite makes an env: games and driving answer in text, like the GUI envs.

    That is a language agent's view; driving runs on the test split.

    ``game_kwargs`` are further options for the games (e.g. ``{"instructions": False}`` for agents
    trained on the state alone) and the driving env (e.g. ``{"traffic": "idm"}``); GUI envs take none.
    """
    if env_id in GAME_IDS:
        return {"action_space": "text", **(game_kwargs or {})}
    if env_id in DRIVING_IDS:
        return {**DRIVING_KWARGS, **(game_kwargs or {})}
    return {}


def reference_agents(suite: str, seed: int = 0) -> dict[str, AgentFactory]:
    """The reference rows of a suite's table.

    ``pdm_closed`` and ``constant_velocity`` for driving, ``oracle`` and ``random`` otherwise.
    """
    if suite == "driving":
        return {name: functools.partial(registered_agent, name) for name in DRIVING_REFERENCE_AGENTS}
    return {"oracle": oracle_agent, "random": lambda env_id, kwargs: random_agent(env_id, kwargs, seed)}


def registered_agent(name: str, env_id: str, env_kwargs: dict[str, Any]) -> Policy:
    """Registered policy ``name`` with its default config, built for ``env_id``.

    The env is made with the options the policy asks for (e.g. an expert's privileged keys).
    """
    from omnigym.core.registry import POLICIES

    cls = POLICIES.get(name)
    env = make_env(env_id, **{**cls.env_kwargs, **env_kwargs})
    try:
        return cls(cls.config_class(), env.observation_space, env.action_space)
    finally:
        env.close()


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
    scores: dict[str, float] = field(default_factory=dict)
    """Means over the episodes of the env's score metrics (:data:`SCORE_METRICS`: driving's PDMS,
    EPDMS, sub-scores and progress); empty for envs that report none."""
    error: str = ""
    """Why the agent could not run on this env (then every figure is NaN): the exception's message."""
    error_type: str = ""
    """The exception's class, e.g. ``ValueError`` (empty when the agent ran)."""
    traceback: str = ""
    """The formatted traceback of the failure, for a bug report (empty when the agent ran)."""


class CountingAgent:
    """A policy as an evaluation action function that counts the action parts it produces."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.env_kwargs = policy.env_kwargs
        """The env options the policy asks for (an expert's privileged keys), as on the policy."""
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
    """The env family's scripted solver.

    ``gui_oracle`` for GUI envs (synthetic, and real MiniWoB++ tasks: ``omnigym/MiniWoB-...``,
    ``miniwob/...``), the task's expert in the manipulation suite (:data:`MANIPULATION_EXPERTS`),
    ``game_solver`` for games.
    """
    if env_id in MANIPULATION_EXPERTS:
        return registered_agent(MANIPULATION_EXPERTS[env_id], env_id, env_kwargs)
    gui = env_id.startswith(("omnigym/GUI-", "omnigym/MiniWoB-", "miniwob/"))
    return registered_agent("gui_oracle" if gui else "game_solver", env_id, env_kwargs)


AgentFactory = Callable[[str, dict[str, Any]], Any]
"""Builds an agent (a Policy or an action function) for ``(env_id, env_kwargs)``."""


def env_spaces(env_id: str, env_kwargs: dict[str, Any]) -> tuple[spaces.Space, spaces.Space]:
    """The observation and action spaces of ``env_id`` made with ``env_kwargs``."""
    env = make_env(env_id, **env_kwargs)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


class SharedAgent:
    """An agent factory that builds its agent once and reuses it on every env it fits.

    Loading a language model takes far longer than a few episodes with it, so a suite needs one
    load per agent. The agent is reused on an env with the same observation and action spaces as
    the env it was built for; a ``vlm`` policy also on any env with the same observation keys and
    text actions (its processor resizes every image, so the games' different frame sizes do not
    matter; its spaces are set to the env's). Otherwise a new agent is built.
    """

    def __init__(self, factory: AgentFactory) -> None:
        """Wrap ``factory`` (called as ``factory(env_id, env_kwargs)``)."""
        self.factory = factory
        self.builds = 0
        """How many times ``factory`` was called."""
        self._agent: Any = None
        self._spaces: tuple[spaces.Space, spaces.Space] | None = None

    def __call__(self, env_id: str, env_kwargs: dict[str, Any]) -> Any:
        """The agent for ``env_id``: the current one if it fits the env's spaces, else a new one."""
        obs_space, action_space = env_spaces(env_id, env_kwargs)
        if self._agent is not None and self._fits(obs_space, action_space):
            if isinstance(self._agent, Policy) and isinstance(obs_space, spaces.Dict):
                self._agent.observation_space, self._agent.action_space = obs_space, action_space
                self._agent.reset()
            self._spaces = (obs_space, action_space)
            return self._agent
        self._agent = self._spaces = None  # drop the old model before loading the next one
        self.builds += 1
        agent = self.factory(env_id, env_kwargs)
        self._agent, self._spaces = agent, (obs_space, action_space)
        return agent

    def _fits(self, obs_space: spaces.Space, action_space: spaces.Space) -> bool:
        """Whether the current agent can act in an env with these spaces."""
        assert self._spaces is not None
        if self._spaces == (obs_space, action_space):
            return True
        built_obs = self._spaces[0]
        return (
            isinstance(self._agent, Policy) and self._agent.name == "vlm"
            and isinstance(action_space, spaces.Text)
            and isinstance(obs_space, spaces.Dict) and isinstance(built_obs, spaces.Dict)
            and set(obs_space.spaces) == set(built_obs.spaces)
        )  # fmt: skip


def evaluate_agents(
    agents: dict[str, AgentFactory], env_ids: list[str], episodes: int, seed: int = 0,
    video_dir: Path | None = None, game_kwargs: dict[str, Any] | None = None, record_dir: Path | None = None,
) -> list[AgentResult]:  # fmt: skip
    """Every agent on every env over the same seeded episodes.

    An agent that fails on an env (it cannot be built for it, or raises while acting) becomes an
    error row with the exception's type, message and traceback, and the suite goes on. With
    ``record_dir``, each agent's episodes on each env are an episode recording in
    ``record_dir/<agent>-<env id>`` (``docs/episodes.md``), so two agents' episodes on the same
    seeds can be watched side by side.
    """
    results = []
    with TaskProgress(len(env_ids) * len(agents), "eval-agent", unit="run") as bar:
        for env_id in env_ids:
            env_kwargs = suite_env_kwargs(env_id, game_kwargs)
            for name, factory in agents.items():
                results.append(
                    _evaluate_one(name, factory, env_id, env_kwargs, episodes, seed, video_dir, record_dir)
                )
                bar.update(postfix=f"(last: {name} on {env_id})")
    return results


def _evaluate_one(
    name: str, factory: AgentFactory, env_id: str, env_kwargs: dict[str, Any], episodes: int, seed: int,
    video_dir: Path | None, record_dir: Path | None = None,
) -> AgentResult:  # fmt: skip
    """One agent on one env: its figures, or an error row."""
    stem = f"{name}-{env_id}".replace("/", "_")
    video = video_dir / f"{stem}.mp4" if video_dir else None
    start = time.perf_counter()
    try:
        agent = factory(env_id, env_kwargs)
        counting = CountingAgent(agent) if isinstance(agent, Policy) else None
        result = evaluate_policy(
            counting or agent, env_id, episodes=episodes, seed=seed, env_kwargs=env_kwargs, video_path=video,
            num_envs=_num_envs(env_id), record_dir=record_dir / stem if record_dir else None, agent_name=name,
        )  # fmt: skip
    except EnvArgumentError as exc:
        if exc.kwarg is not None:  # e.g. a solver's env option a GUI env does not take: this agent's
            return _error_row(name, env_id, exc, time.perf_counter() - start)
        raise  # a misspelt env id in the suite is the user's error, for every agent alike
    except gymnasium.error.UnregisteredEnv:
        raise
    except Exception as exc:  # one failing agent must not end the suite: its row says why
        # e.g. a game solver on a GUI env, a prompt longer than a VLM's max_prompt_tokens, CUDA OOM
        return _error_row(name, env_id, exc, time.perf_counter() - start)
    seconds = time.perf_counter() - start
    summary = result.summary()
    steps = float(np.sum(result.lengths))
    invalid = float(np.nansum(result.metrics.get("invalid_actions", [0.0])))
    return AgentResult(
        agent=name, env_id=env_id, episodes=len(result.returns),
        success_rate=summary.get("success_rate", float("nan")),
        mean_steps=summary["length_mean"], invalid_action_rate=invalid / max(steps, 1.0),
        parts_per_step=counting.parts / max(counting.steps, 1) if counting else 1.0,
        seconds=seconds, steps_per_s=steps / max(seconds, 1e-9),
        scores={k: summary[f"{k}_mean"] for k in SCORE_METRICS if f"{k}_mean" in summary},
    )  # fmt: skip


def _num_envs(env_id: str) -> int:
    """Episodes run side by side: one for a real-browser MiniWoB++ task, else evaluate_policy's 8.

    Each MiniWoB++ slot is a Chromium (~400 MB, a CPU core under load) with a real-time page.
    """
    return 1 if env_id.startswith(("omnigym/MiniWoB-", "miniwob/")) else 8


def _error_row(name: str, env_id: str, exc: BaseException, seconds: float) -> AgentResult:
    """The row of an agent that failed on an env: NaN figures, the exception in full; noted on stderr."""
    print(f"eval-agent: {name} failed on {env_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
    nan = float("nan")
    return AgentResult(
        name, env_id, 0, nan, nan, nan, nan, seconds, nan, error=str(exc), error_type=type(exc).__name__,
        traceback="".join(traceback.format_exception(exc)),
    )  # fmt: skip


def results_markdown(results: list[AgentResult]) -> str:
    """One row per (agent, env), then one summary row per agent (means over the suite).

    Envs with scores add their columns (driving: PDMS, EPDMS, NC, DAC, TTC, EP, C; manipulation:
    the final COVERAGE or DISTANCE; every score is in ``results.json``).
    """
    columns = ("pdms", "epdms", "nc", "dac", "ttc", "ep", "c", "coverage", "distance")
    shown = [k for k in columns if any(k in r.scores for r in results)]
    header = "| agent | env | episodes | success | mean steps | invalid actions | parts/step | seconds |"
    header += "".join(f" {k.upper()} |" for k in shown)
    lines = [header, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * len(shown)]
    for r in results:
        if r.error:
            dashes = " - |" * len(shown)
            lines.append(f"| {r.agent} | {r.env_id} | - | - | - | - | - | error: {r.error[:80]} |{dashes}")
            continue
        scores = "".join(f" {r.scores.get(k, float('nan')):.3f} |" for k in shown)
        lines.append(
            f"| {r.agent} | {r.env_id} | {r.episodes} | {r.success_rate:.2f} | {r.mean_steps:.1f} | "
            f"{r.invalid_action_rate:.2f} | {r.parts_per_step:.1f} | {r.seconds:.2f} |{scores}"
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
        rates = [r.success_rate for r in rows if not np.isnan(r.success_rate)]
        success = float(np.mean(rates)) if rates else float("nan")  # driving reports scores, no success
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


class WarningTally:
    """Collects the warnings raised inside a ``with`` block and counts them by kind.

    Python warnings (``warnings.warn``) and records of the ``transformers`` logger at WARNING or
    above are both held back; :meth:`summary` gives one line for them all. A tokenizer that warns
    on each of 40 prompts then costs one line, not 40.
    """

    LOGGERS = ("transformers",)
    """Loggers whose warnings are collected (their own handlers are muted meanwhile)."""

    def __init__(self) -> None:
        """An empty tally."""
        self.counts: Counter[str] = Counter()
        self._catcher: warnings.catch_warnings[list[warnings.WarningMessage]] | None = None
        self._caught: list[warnings.WarningMessage] = []
        self._handler = _TallyHandler(self)
        self._saved: list[tuple[logging.Logger, list[logging.Handler], bool]] = []

    def add(self, kind: str, message: str) -> None:
        """Count one warning (numbers in its first line are folded, so "364 tokens" ~ "512 tokens")."""
        first = message.strip().splitlines()[0] if message.strip() else ""
        self.counts[f"{kind}: {re.sub(r'[0-9]+', 'N', first)}"] += 1

    def summary(self, kinds: int = 3, width: int = 120) -> str | None:
        """``N warnings (M kinds): <most frequent kind> (xK); ...``, or None without warnings."""
        if not self.counts:
            return None
        total = sum(self.counts.values())
        shown = [f"{kind[:width]} (x{count})" for kind, count in self.counts.most_common(kinds)]
        more = f"; +{len(self.counts) - kinds} more kinds" if len(self.counts) > kinds else ""
        plural = "s" if len(self.counts) != 1 else ""
        return f"{total} warnings ({len(self.counts)} kind{plural}): " + "; ".join(shown) + more

    def __enter__(self) -> WarningTally:
        """Start collecting."""
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        for name in self.LOGGERS:
            log = logging.getLogger(name)
            self._saved.append((log, list(log.handlers), log.propagate))
            for handler in list(log.handlers):
                log.removeHandler(handler)
            log.addHandler(self._handler)
            log.propagate = False
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop collecting; restore the warning filters and the loggers."""
        for log, handlers, propagate in self._saved:
            log.removeHandler(self._handler)
            for handler in handlers:
                log.addHandler(handler)
            log.propagate = propagate
        self._saved = []
        if self._catcher is not None:
            self._catcher.__exit__(exc_type, exc, tb)
            self._catcher = None
        for caught in self._caught:
            self.add(caught.category.__name__, str(caught.message))
        self._caught = []


class _TallyHandler(logging.Handler):
    """Hands a logger's WARNING-and-above records to a :class:`WarningTally`."""

    def __init__(self, tally: WarningTally) -> None:
        super().__init__(level=logging.WARNING)
        self.tally = tally

    def emit(self, record: logging.LogRecord) -> None:
        """Count the record under its logger's name."""
        self.tally.add(record.name.split(".")[0], record.getMessage())
