"""Isaac Lab tasks as omnigym torch vector envs, whose data stays on the simulation device.

An Isaac Lab env (``ManagerBasedRLEnv`` or ``DirectRLEnv``, made by ``gym.make("Isaac-...",
cfg=env_cfg)`` once Isaac Sim runs) is batched: it holds ``num_envs`` copies on ``device``, takes
actions ``Tensor [N, A]``, returns observation groups ``{"policy": Tensor [N, D], ...}``, rewards
``Tensor [N]``, terminated and truncated (time-out) ``Tensor [N]`` bool and an ``extras`` dict
whose ``"log"`` holds episode statistics, and resets finished copies inside ``step``.
:class:`IsaacLabVectorEnv` puts that under omnigym's conventions without leaving torch:

* the ``policy`` group becomes ``state`` (float32);
* like RSL-RL, a finite-horizon task's time-outs are terminations, and since Isaac Lab returns
  no final observation, truncated episodes bootstrap from the last observation before the reset
  (RSL-RL bootstraps from the same value);
* ``extras["log"]`` values become per-episode metrics (a scalar, Isaac Lab's mean over the
  episodes that just ended, counts for each of them; an ``[N]`` tensor counts per env).

``omnigym/TorchReach-v0`` (``torch_reach.py``) follows the same conventions, so the CPU tests run
this code path without Isaac Lab.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.types import OBS_STATE
from omnigym.core.vector import TorchVectorEnv

INSTALL_HINT = (
    "Isaac Lab is not installed. It needs Linux, an NVIDIA GPU and Python 3.11: "
    "pip install 'isaaclab[isaacsim,all]' --extra-index-url https://pypi.nvidia.com "
    "(docs/envs/manipulation-adapters.md)"
)


class IsaacLabVectorEnv(TorchVectorEnv):
    """An env with Isaac Lab's batched torch interface, as a :class:`TorchVectorEnv`.

    Args:
        env: an Isaac Lab env (or anything with its interface: ``num_envs``, ``device``,
            ``single_observation_space``, ``single_action_space``, ``reset``, ``step``, ``cfg``).
        obs_group: the observation group the policy reads.
        clip_actions: clip actions to ``[-clip_actions, clip_actions]`` (Isaac Lab's action
            spaces are unbounded); None keeps the env's action space.
    """

    def __init__(self, env: Any, obs_group: str = "policy", clip_actions: float | None = None) -> None:
        self.env = env
        base = env.unwrapped
        self.num_envs = int(base.num_envs)
        self.device = torch.device(base.device)
        group = base.single_observation_space[obs_group]
        if not isinstance(group, spaces.Box):
            raise TypeError(
                f"observation group {obs_group!r} is {group}; concatenate its terms (concatenate_terms=True)"
            )
        self.obs_group = obs_group
        self.single_observation_space = spaces.Dict(
            {OBS_STATE: spaces.Box(-np.inf, np.inf, (int(np.prod(group.shape)),), np.float32)}
        )
        action_space = base.single_action_space
        if clip_actions is not None:
            action_space = spaces.Box(-clip_actions, clip_actions, action_space.shape, np.float32)
        self.single_action_space = action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.finite_horizon = bool(getattr(base.cfg, "is_finite_horizon", False))
        self.render_mode = getattr(env, "render_mode", None)
        self._obs: dict[str, Tensor] | None = None

    def _observation(self, groups: dict[str, Tensor]) -> dict[str, Tensor]:
        # A copy: it is kept as the next step's final observation, and the simulator may
        # write its observation buffers in place.
        state = groups[self.obs_group].reshape(self.num_envs, -1)
        return {OBS_STATE: state.to(torch.float32, copy=True)}

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """Reset every copy. Isaac Lab seeds one generator for the batch, so ``seed`` is an int."""
        if isinstance(seed, list):
            raise ValueError("Isaac Lab envs take one seed for the whole batch, not one per env")
        groups, _ = self.env.reset(seed=seed)
        self._obs = self._observation(groups)
        return self._obs, {}

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """One batched step; finished copies have already been reset (see the module docstring)."""
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        groups, reward, terminated, truncated, extras = self.env.step(actions.to(self.device))
        terminated, truncated = terminated.bool(), truncated.bool()
        if self.finite_horizon:  # the time limit is part of the task: no bootstrapping
            terminated, truncated = terminated | truncated, torch.zeros_like(truncated)
        info = {"final_obs": self._obs, "final_info": self._episode_metrics(extras.get("log") or {})}
        self._obs = self._observation(groups)
        return self._obs, reward.float(), terminated, truncated, info

    def _episode_metrics(self, log: dict[str, Any]) -> dict[str, Tensor]:
        """``extras["log"]`` as ``name -> Tensor [N]``: scalars count for every finished env."""
        out = {}
        for name, value in log.items():
            if not isinstance(value, (bool, int, float, Tensor)):
                continue
            value = torch.as_tensor(value, device=self.device)
            if value.dim() == 0:
                value = value.expand(self.num_envs)
            if value.shape == (self.num_envs,):
                out[name] = value.float()
        return out

    def close_extras(self, **kwargs: Any) -> None:
        """Close the wrapped env."""
        self.env.close()


_APP: Any = None
"""The running Isaac Sim app (one per process)."""


def _launch_app(headless: bool, device: str, enable_cameras: bool) -> None:
    """Start Isaac Sim once per process (Isaac Lab's modules import only after it runs)."""
    from isaaclab.app import AppLauncher

    global _APP
    if _APP is None:
        _APP = AppLauncher(headless=headless, device=device, enable_cameras=enable_cameras).app


def make_isaaclab_vec_env(
    task_id: str,
    *,
    num_envs: int,
    device: str = "cuda:0",
    headless: bool = True,
    enable_cameras: bool = False,
    render_mode: str | None = None,
    obs_group: str = "policy",
    clip_actions: float | None = None,
) -> IsaacLabVectorEnv:
    """Launch Isaac Sim (once) and make an Isaac Lab task as an :class:`IsaacLabVectorEnv`.

    The ``isaaclab`` env backend (``omnigym.core.registry.ENV_BACKENDS``) that ``make_vec_env``
    uses for ``Isaac-...`` ids.

    Follows Isaac Lab's own scripts: ``AppLauncher``, ``parse_env_cfg(task, device, num_envs)``,
    ``gym.make(task, cfg=env_cfg)``.

    Args:
        task_id: an Isaac Lab task id such as ``Isaac-Lift-Cube-Franka-v0``.
        num_envs: copies simulated in one batch.
        device: the simulation device (observations and rewards stay on it).
        headless: run Isaac Sim without a window.
        enable_cameras: enable camera sensors and ``rgb_array`` rendering.
        render_mode: passed to ``gym.make``.
        obs_group: the observation group the policy reads.
        clip_actions: clip actions to ``[-clip_actions, clip_actions]``.

    Raises:
        ImportError: Isaac Lab is not installed (with how to install it).
    """
    try:
        _launch_app(headless, device, enable_cameras)
        import isaaclab_tasks  # noqa: F401  (registers the Isaac-... ids)
        from isaaclab_tasks.utils import parse_env_cfg
    except ImportError as exc:
        raise ImportError(f"{task_id}: {INSTALL_HINT}") from exc
    env_cfg = parse_env_cfg(task_id, device=device, num_envs=num_envs)
    env = gym.make(task_id, cfg=env_cfg, render_mode=render_mode)
    return IsaacLabVectorEnv(env, obs_group=obs_group, clip_actions=clip_actions)
