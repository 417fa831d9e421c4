"""The ``hierarchical`` policy: a planner names a sub-goal every K steps, a controller acts every step.

HiVLA (a VLM planner over a flow-matching action expert) and Instruct-to-Act (instructions
conditioning a learned controller) split an embodied agent in two. Here both parts are policies:

* the **planner** (:mod:`~omnigym.policies.hierarchical.planners`) returns a text per row; it is
  called for a row at its episode's first step and every ``every_k_steps`` steps after. A text
  planner's reply (``vlm``) is parsed against the sub-goal vocabulary; a reply naming none keeps
  the row's previous sub-goal (counted in :attr:`HierarchicalPolicy.invalid_replies`);
* the **controller** is a registered action-chunk policy (``flow`` by default) whose observation
  is the env's ``image``/``state`` plus the key ``subgoal``: :func:`embed_text` of the current
  sub-goal. Trained on expert steps relabelled with their sub-goal (``subgoals.relabel_episodes``),
  it is conditioned on the planner's words at every step.

With the ``instruction`` planner the controller is conditioned on the task instruction alone:
the same architecture without a plan, the baseline the planner has to beat. The controller's
weights are saved with the policy; the planner is rebuilt from its config (a trained VLM planner
from ``planner_path``), not saved in the weights.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.text_actions import ActionParseError
from omnigym.core.types import OBS_IMAGE, OBS_STATE, OBS_TEXT, Obs, PolicyStep
from omnigym.policies.hierarchical.planners import batch_size, build_planner
from omnigym.policies.hierarchical.subgoals import (
    CUBE_STATE_DIM,
    EMBEDDING_DIM,
    TWO_STAGE_STATE_DIM,
    SubgoalVocabulary,
    describe_cube_state,
    embed_text,
    planner_prompt,
)
from omnigym.policies.hierarchical.tasks import get_task

SUBGOAL_KEY = "subgoal"
"""The controller's observation key of the sub-goal embedding ``[B, embedding_dim]``."""
SMALL_FLOW: dict[str, Any] = {
    "n_obs_steps": 2, "horizon": 8, "n_action_steps": 1, "down_dims": [32, 64],
    "state_hidden_sizes": [128, 128], "time_embed_dim": 64, "num_inference_steps": 5,
    "image_widths": [16, 32], "num_keypoints": 16, "image_feature_dim": 32,
}  # fmt: skip
"""The default controller's settings: a CPU-sized flow policy that re-plans every step."""


@dataclass
class HierarchicalPolicyConfig(PolicyConfig):
    """A planner, a sub-goal-conditioned controller and how often the planner speaks."""

    type: str = "hierarchical"
    task: str = "pickplace"
    """The task (``tasks.SUBGOAL_TASKS``: ``pickplace``, ``pushcube_two_stage``): the scripted
    planner's stage rule and the default ``subgoals`` and ``instruction``."""
    planner: str = "instruction"
    """``scripted`` (the task's stage rule), ``instruction`` (the task only) or a registered text
    policy (``vlm``) reading the planner prompt."""
    planner_path: str = ""
    """A saved text planner (``save_pretrained`` folder, e.g. a GRPO-trained VLM); replaces
    ``planner``/``planner_config``."""
    planner_config: dict[str, Any] = field(default_factory=dict)
    """Config fields of the planner (a ``vlm``'s ``model``, ``max_new_tokens``...)."""
    controller: str = "flow"
    """Registered type of the controller (an action-chunk policy: ``flow``, ``diffusion``)."""
    controller_path: str = ""
    """A saved controller to use (its type and config replace ``controller`` and
    ``controller_config``; its weights are saved with this policy). Empty: a fresh controller."""
    controller_config: dict[str, Any] = field(default_factory=lambda: dict(SMALL_FLOW))
    """Config fields of the controller built when ``controller_path`` is empty."""
    every_k_steps: int = 5
    """Env steps between two planner calls for a row (K)."""
    subgoals: tuple[str, ...] = ()
    """The sub-goal vocabulary a text planner chooses from (empty: the task's)."""
    instruction: str = ""
    """The task instruction (the ``instruction`` planner's text and a text planner's task; empty:
    the task's)."""
    embedding_dim: int = EMBEDDING_DIM
    """Width of the sub-goal embedding the controller reads."""
    reset_on_switch: bool = False
    """Drop a row's queued controller actions and history when its sub-goal changes."""

    def __post_init__(self) -> None:
        """Fill the task's defaults; reject values that cannot work."""
        task = get_task(self.task)
        self.subgoals = tuple(self.subgoals) or task.subgoals
        self.instruction = self.instruction or task.instruction
        if self.every_k_steps < 1:
            raise ValueError(f"policy.every_k_steps must be >= 1, got {self.every_k_steps}")
        SubgoalVocabulary(self.subgoals).check_embeddings(self.embedding_dim)


class HierarchicalPolicy(Policy):
    """A planner over a sub-goal-conditioned controller, as one agent (see the module doc)."""

    name: ClassVar[str] = "hierarchical"
    config_class: ClassVar[type[PolicyConfig]] = HierarchicalPolicyConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    config: HierarchicalPolicyConfig

    def __init__(
        self, config: HierarchicalPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self.vocabulary = SubgoalVocabulary(config.subgoals)
        self.env_keys = tuple(
            k for k in (OBS_IMAGE, OBS_STATE) if isinstance(observation_space.spaces.get(k), spaces.Box)
        )
        """The env's observation keys the controller reads besides the sub-goal."""
        self.controller = self._build_controller(config, observation_space, action_space)
        planner, self.text_planner = build_planner(
            config.planner, config.planner_path, config.planner_config, observation_space,
            {"task": config.task, "subgoals": config.subgoals, "instruction": config.instruction},
        )  # fmt: skip
        object.__setattr__(self, "planner", planner)  # not a submodule: its weights are not saved here
        self.planner: Policy
        self.invalid_replies = 0
        """Text-planner replies that named no sub-goal (each kept the row's previous one)."""
        self._texts: list[str] = []
        self._count = np.zeros(0, dtype=np.int64)
        self._embeddings: dict[str, np.ndarray] = {}

    def _build_controller(
        self, config: HierarchicalPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> Policy:
        """The controller: loaded from ``controller_path``, else built from its type and config."""
        from omnigym.core.config import build_dataclass, config_to_dict
        from omnigym.core.registry import POLICIES

        width = config.embedding_dim
        if config.controller_path:
            if not Path(config.controller_path).exists():
                raise FileNotFoundError(f"policy.controller_path {config.controller_path!r} does not exist")
            controller = Policy.from_pretrained(config.controller_path)
            subgoal = controller.observation_space.spaces.get(SUBGOAL_KEY)
            if subgoal is None or tuple(subgoal.shape or ()) != (width,):
                raise ValueError(
                    f"{config.controller_path} does not read a {width}-wide {SUBGOAL_KEY!r} observation: "
                    "train it on relabelled demonstrations (omnigym bench hierarchical_pickplace)"
                )
        else:
            cls = POLICIES.get(config.controller)
            fields = dict(config.controller_config)
            keys = list(fields.get("obs_keys") or self.env_keys)
            fields["obs_keys"] = [*(k for k in keys if k != SUBGOAL_KEY), SUBGOAL_KEY]
            built = build_dataclass(
                cls.config_class, {**fields, "type": config.controller}, path="policy.controller_config"
            )
            controller = cls(built, controller_space(observation_space, width), action_space)
        missing = (
            set(getattr(controller.config, "obs_keys", ())) - {SUBGOAL_KEY} - set(observation_space.spaces)
        )
        if missing:
            raise ValueError(f"the controller reads {sorted(missing)}, which the env does not observe")
        if tuple(controller.action_space.shape or ()) != tuple(action_space.shape or ()):
            raise ValueError(f"the controller acts in {controller.action_space}, the env in {action_space}")
        plain = {k: v for k, v in config_to_dict(controller.config).items() if k != "type"}
        self.config = dataclasses.replace(
            config, controller=controller.name, controller_path="", controller_config=plain
        )
        return controller

    # --- acting -----------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """The controller's action for each row under the row's current sub-goal.

        Rows at their episode's step ``0, K, 2K, ...`` ask the planner first. The action carries
        one part of log-probability 0 (the pair is trained by imitation and, for a text planner,
        by GRPO on the planner env, not as one RL policy).
        """
        batch = batch_size(obs)
        if len(self._texts) != batch:
            self._start(batch)
        due = np.flatnonzero(self._count % self.config.every_k_steps == 0)
        if len(due) or not self.text_planner:
            self._plan(obs, due, deterministic)
        action = self.control(obs, self._texts, deterministic=deterministic)
        self._count += 1
        logprob = torch.zeros(batch, 1)
        return PolicyStep(action=action, logprob=logprob, mask=torch.ones_like(logprob, dtype=torch.bool))

    @torch.no_grad()
    def control(self, obs: Obs, subgoals: list[str], *, deterministic: bool = True) -> Tensor:
        """The controller's actions ``[B, *action_shape]`` for env observations under given sub-goal texts.

        The planner env (``planner_env.py``) calls this with the sub-goal its planner chose.
        """
        keys = getattr(self.controller.config, "obs_keys", self.env_keys)
        controller_obs = {k: obs[k] for k in keys if k != SUBGOAL_KEY}
        controller_obs[SUBGOAL_KEY] = torch.as_tensor(np.stack([self._embed(t) for t in subgoals]))
        return self.controller.act(controller_obs, deterministic=deterministic).action

    @property
    def subgoals(self) -> list[str]:
        """Each row's current sub-goal text."""
        return list(self._texts)

    def _plan(self, obs: Obs, rows: np.ndarray, deterministic: bool) -> None:
        """New sub-goals for ``rows`` from the planner (a text planner's bad reply keeps the old one).

        A built-in planner reads the whole batch (cheap, and a planner with memory sees every
        step of every row); only ``rows`` take its answer.
        """
        if self.text_planner:
            replies = list(self.planner.act(self._prompts(obs, rows), deterministic=deterministic).action)
        else:
            every = list(self.planner.act(obs, deterministic=deterministic).action)
            replies = [every[row] for row in rows.tolist()]
        changed = np.zeros(len(self._texts), dtype=bool)
        for row, reply in zip(rows.tolist(), replies, strict=True):
            text = str(reply)
            if self.text_planner:
                try:
                    text = self.vocabulary.words[self.vocabulary.parse(text)]
                except ActionParseError:
                    self.invalid_replies += 1
                    continue
            changed[row] = text != self._texts[row]
            self._texts[row] = text
        if self.config.reset_on_switch and changed.any():
            self.controller.reset(torch.as_tensor(changed))

    def _prompts(self, obs: Obs, rows: np.ndarray) -> Obs:
        """A text planner's observations for ``rows``: the planner prompt (and the image)."""
        states = obs.get(OBS_STATE)
        texts = obs.get(OBS_TEXT)
        prompts = []
        for row in rows.tolist():
            state = None if states is None else np.asarray(torch.as_tensor(states[row]).cpu(), np.float64)
            scene = (
                describe_cube_state(state)
                if state is not None and state.shape in ((CUBE_STATE_DIM,), (TWO_STAGE_STATE_DIM,))
                else ""
            )
            instruction = str(texts[row]) if texts is not None else self.config.instruction
            prompts.append(planner_prompt(instruction, self.vocabulary, self._texts[row], scene))
        out: dict[str, Any] = {OBS_TEXT: np.array(prompts, dtype=object)}
        if OBS_IMAGE in self.planner.observation_space.spaces:
            out[OBS_IMAGE] = _rows(obs[OBS_IMAGE], rows)
        return out

    def _embed(self, text: str) -> np.ndarray:
        if text not in self._embeddings:
            self._embeddings[text] = embed_text(text, self.config.embedding_dim)
        return self._embeddings[text]

    def _start(self, batch: int) -> None:
        self._texts = [self.vocabulary.words[0]] * batch
        self._count = np.zeros(batch, dtype=np.int64)

    def reset(self, done_mask: Tensor | None = None) -> None:
        """Forget the sub-goals, step counts and controller memory of rows where ``done_mask`` (all: None)."""
        self.controller.reset(done_mask)
        self.planner.reset(done_mask)
        if done_mask is None:
            self._start(0)
            return
        done = np.asarray(torch.as_tensor(done_mask).cpu(), dtype=bool).reshape(-1)
        if done.shape != self._count.shape:
            self._start(0)
            return
        self._count[done] = 0
        for row in np.flatnonzero(done).tolist():
            self._texts[row] = self.vocabulary.words[0]


def controller_space(observation_space: spaces.Dict, embedding_dim: int) -> spaces.Dict:
    """The controller's observation space: the env's Box keys plus ``subgoal`` ``[embedding_dim]``."""
    keys: dict[str, spaces.Space] = {
        k: s for k, s in observation_space.spaces.items() if isinstance(s, spaces.Box)
    }
    keys[SUBGOAL_KEY] = spaces.Box(-1.0, 1.0, (embedding_dim,), np.float32)
    return spaces.Dict(keys)


def _rows(value: Any, rows: np.ndarray) -> Any:
    """``value[rows]`` for a tensor, an array or a list of texts."""
    if isinstance(value, Tensor):
        return value[torch.as_tensor(rows, device=value.device)]
    if isinstance(value, np.ndarray):
        return value[rows]
    return [value[i] for i in rows.tolist()]
