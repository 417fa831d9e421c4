"""The planner's env: one text action names a sub-goal, a frozen controller runs it for K steps.

GRPO trains a VLM planner on episode success through the platform's unchanged loop when the
planner's decisions are an env's text actions. :class:`SubgoalEnv` wraps a task env
(``omnigym/PickPlace-v0`` by default, sparse reward: 1 on success) and a frozen sub-goal-conditioned
controller (a ``hierarchical`` policy's, see :mod:`~omnigym.policies.hierarchical.policy`):

* **Observation**: ``text``, the planner prompt (task, sub-goal vocabulary, current sub-goal,
  the scene in words: :func:`~omnigym.policies.hierarchical.subgoals.planner_prompt`).
* **Action**: a reply (``Text``); its ``<answer>`` part must name a sub-goal of the vocabulary.
* **Step**: the controller acts for ``every_k_steps`` task steps (fewer when the task episode
  ends) conditioned on the sub-goal; the reward is the sum of the task's rewards.
* **Bad input**: a reply naming no sub-goal (or not a string) keeps the previous sub-goal (the
  vocabulary's first at an episode's start), runs it, and costs ``invalid_penalty``;
  ``info["action_valid"]`` is False and ``info["action_error"]`` says why. Never an exception.
* **Episode end**: the task's (``terminated`` on success, ``truncated`` at its time limit).

Registered as ``omnigym/PickPlaceSubgoals-v0`` when this module is imported; configs name it
``omnigym.policies.hierarchical.planner_env:omnigym/PickPlaceSubgoals-v0`` so that Gymnasium
imports the module first.
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy
from omnigym.core.registry import ENV_BACKENDS
from omnigym.core.text_actions import ACTION_TEXT_MAX_LENGTH, ActionParseError
from omnigym.core.types import OBS_STATE, OBS_TEXT
from omnigym.policies.hierarchical.planners import PICKPLACE_INSTRUCTION, PROMPT_SPACE
from omnigym.policies.hierarchical.policy import HierarchicalPolicy, HierarchicalPolicyConfig
from omnigym.policies.hierarchical.subgoals import (
    CUBE_STATE_DIM,
    PICKPLACE_SUBGOALS,
    describe_cube_state,
    planner_prompt,
)

ENV_ID = "omnigym/PickPlaceSubgoals-v0"
MODULE_ENV_ID = f"{__name__}:{ENV_ID}"
"""The id that makes Gymnasium import this module (and so register :data:`ENV_ID`) first."""
FRESH_CONTROLLER_SEED = 0
"""Initialisation seed of the untrained controller an env without ``controller`` runs."""


class SubgoalEnv(gym.Env[dict[str, Any], str]):
    """Sub-goal decisions over a task env and a frozen controller (see the module doc).

    Args:
        env_id: the task env (its ``state`` observation is read; cube tasks get a scene text).
        env_kwargs: its keyword arguments (default: sparse reward, so a return is a success).
        controller: a saved ``hierarchical`` policy or sub-goal-conditioned controller
            (``save_pretrained`` folder). Empty: a fresh, untrained controller, the same in every
            env (smoke runs only).
        every_k_steps: task steps per sub-goal.
        subgoals: the vocabulary.
        instruction: the task, in the prompt.
        invalid_penalty: subtracted from the reward of a step whose reply names no sub-goal.
        embedding_dim: width of the sub-goal embedding (a fresh controller's; a saved one's must match).
    """

    metadata = {"render_modes": []}  # noqa: RUF012  (gymnasium's attribute)

    def __init__(
        self,
        env_id: str = "omnigym/PickPlace-v0",
        env_kwargs: dict[str, Any] | None = None,
        controller: str = "",
        every_k_steps: int = 5,
        subgoals: tuple[str, ...] = PICKPLACE_SUBGOALS,
        instruction: str = PICKPLACE_INSTRUCTION,
        invalid_penalty: float = 0.1,
        embedding_dim: int = 32,
    ) -> None:
        if every_k_steps < 1:
            raise ValueError(f"every_k_steps must be >= 1, got {every_k_steps}")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty must be >= 0, got {invalid_penalty}")
        self.task = ENV_BACKENDS.build("real", env_id, {"reward_type": "sparse", **(env_kwargs or {})})
        task_space = self.task.observation_space
        if not isinstance(task_space, spaces.Dict) or OBS_STATE not in task_space.spaces:
            raise ValueError(f"{env_id} must observe 'state' (env_kwargs obs_keys) for the controller")
        self.agent = load_agent(
            controller, task_space, self.task.action_space, tuple(subgoals), embedding_dim
        )
        self.agent.eval()
        self.vocabulary = self.agent.vocabulary
        self.every_k_steps = every_k_steps
        self.instruction = instruction
        self.invalid_penalty = float(invalid_penalty)
        self.observation_space = spaces.Dict({OBS_TEXT: PROMPT_SPACE})
        self.action_space = spaces.Text(ACTION_TEXT_MAX_LENGTH, min_length=0, charset=string.printable)
        self._subgoal = self.vocabulary.words[0]
        self._task_obs: dict[str, Any] = {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A new task episode; the sub-goal starts as the vocabulary's first."""
        super().reset(seed=seed)
        self._task_obs, info = self.task.reset(seed=seed, options=options)
        self.agent.reset()
        self._subgoal = self.vocabulary.words[0]
        return self._observation(), {**info, "subgoal": self._subgoal}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Run the named sub-goal (or, for a bad reply, the previous one) for up to K task steps."""
        valid, error = True, ""
        try:
            if not isinstance(action, str):
                raise ActionParseError(f"a sub-goal reply must be a str, got {type(action).__name__}")
            self._subgoal = self.vocabulary.words[self.vocabulary.parse(action)]
        except ActionParseError as exc:
            valid, error = False, str(exc)
        reward, terminated, truncated, info = 0.0, False, False, {}
        steps = 0
        for steps in range(1, self.every_k_steps + 1):  # noqa: B007  (the count is reported)
            batch = {
                k: torch.as_tensor(np.asarray(v))[None] for k, v in self._task_obs.items() if k != OBS_TEXT
            }
            action_row = self.agent.control(batch, [self._subgoal], deterministic=True)[0].cpu().numpy()
            self._task_obs, task_reward, terminated, truncated, info = self.task.step(action_row)
            reward += float(task_reward)
            if terminated or truncated:
                break
        info = {**info, "action_valid": valid, "subgoal": self._subgoal, "task_steps": steps}
        if not valid:
            info["action_error"] = error
            reward -= self.invalid_penalty
        return self._observation(), reward, bool(terminated), bool(truncated), info

    def _observation(self) -> dict[str, Any]:
        state = np.asarray(self._task_obs[OBS_STATE], dtype=np.float64)
        scene = describe_cube_state(state) if state.shape == (CUBE_STATE_DIM,) else ""
        return {OBS_TEXT: planner_prompt(self.instruction, self.vocabulary, self._subgoal, scene)}

    def close(self) -> None:
        """Close the task env."""
        self.task.close()


def load_agent(
    path: str,
    observation_space: spaces.Dict,
    action_space: spaces.Space,
    subgoals: tuple[str, ...],
    width: int,
) -> HierarchicalPolicy:
    """A ``hierarchical`` policy around the controller (or ``hierarchical`` policy) saved at ``path``.

    Empty ``path``: a fresh controller initialised from a fixed seed, so every env (and every copy
    a vector env makes) runs the same untrained controller and one ``reset`` seed gives one episode.
    """
    if path:
        loaded = Policy.from_pretrained(path)
        if isinstance(loaded, HierarchicalPolicy):
            return loaded
        config = HierarchicalPolicyConfig(controller_path=path, subgoals=subgoals, embedding_dim=width)
    else:
        config = HierarchicalPolicyConfig(subgoals=subgoals, embedding_dim=width)
        with torch.random.fork_rng():  # leaves the caller's random stream as it was
            torch.manual_seed(FRESH_CONTROLLER_SEED)
            return HierarchicalPolicy(config, observation_space, action_space)
    return HierarchicalPolicy(config, observation_space, action_space)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=f"{__name__}:SubgoalEnv")
