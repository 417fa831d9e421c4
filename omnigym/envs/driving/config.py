"""Settings of the driving pseudo-simulator (the keyword arguments of its Gymnasium ids)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from omnigym.core.registry import ENV_BACKENDS
from omnigym.envs.driving.observations import VECTOR_KEYS, ObservationConfig
from omnigym.envs.driving.scenes import HARD_SCENES, SceneConfig

SPLITS = ("train", "val", "test", "hard")
PRIVILEGED = ("pdm_closed", "log_replay", "pdm_closed_meta")


@dataclass
class DrivingConfig:
    """How the driving env runs. Every field is a ``gym.make`` keyword argument."""

    action_mode: Literal["control", "plan"] = "control"
    """``control``: (acceleration m/s², steering rate rad/s) per 0.1 s; ``plan``: NAVSIM-style
    8 poses (x, y, heading; ego frame) at 0.5 s..4 s, tracked for ``replan_every`` steps."""
    action_space: Literal["box", "text"] = "box"
    """``box``: numbers (see ``action_mode``); ``text`` (plan mode): a written plan or a meta action
    such as ``change left, accelerate``, for language-model policies (``text_actions.py``)."""
    invalid_action_penalty: float = -1.0
    """Added to the reward of a text action that does not parse (its slot keeps its last valid action).
    A plan step earns up to about 5 (0.5 s of per-0.1 s score shares), so this costs a fifth of it."""
    replan_every: int = 5
    """Plan mode: 0.1 s steps a plan drives before the next (5 = re-plan every 0.5 s, 40 = open loop)."""
    traffic: Literal["log", "idm", "learned"] = "log"
    """``log``: non-reactive log replay (NAVSIM v1); ``idm``: agents keep their logged paths but
    brake for the ego and each other with IDM; ``learned``: the saved traffic world model at
    ``traffic_model_path`` moves them (a learned model object also plugs in via ``traffic_model``)."""
    traffic_model: Any = None
    """An object implementing ``agents.TrafficModel`` (overrides ``traffic``); Python use only."""
    traffic_model_path: str | None = None
    """With ``traffic="learned"``: a folder saved by ``TrafficWorldModel.save_pretrained``."""
    split: Literal["train", "val", "test", "hard"] = "train"
    """Which procedural scenes: disjoint seed ranges (see ``scenes.SPLIT_OFFSETS``); ``hard`` is a
    test split of scenes that stress what PDMS punishes (``scenes.HARD_SCENES``)."""
    num_scenes: int = 1000
    """Scenes in the split; resets draw among them with the reset seed."""
    scene_dir: str | None = None
    """A saved scene set to drive instead of procedural scenes."""
    cache_dir: str | None = None
    """Where generated scenes are cached on disk (default: $OMNIGYM_CACHE/driving or
    ~/.cache/omnigym/driving); the empty string disables the disk cache."""
    scene: dict[str, Any] = field(default_factory=dict)
    """Overrides of ``scenes.SceneConfig`` (num_agents, episode_seconds, kinds, ...)."""
    obs_keys: tuple[str, ...] = VECTOR_KEYS
    """Observation keys: state, agents, route, lanes, lights, image, text."""
    num_agents_obs: int = 16
    num_route_points: int = 20
    num_lanes_obs: int = 6
    num_lane_points: int = 10
    num_lights_obs: int = 4
    image_size: int = 64
    """BEV raster side in pixels."""
    image_meters: float = 64.0
    image_channels: int = 3
    """3: road / agents+lights / route+ego channels; 1: one grey composite (docs/envs/driving.md)."""
    """BEV raster side in metres."""
    navsim_version: Literal["v1", "v2"] = "v1"
    """The ego-progress rule of the episode PDMS: ``v1`` (NAVSIM v1.1, as the navtest leaderboard:
    progress masked by NC and DAC over the best masked progress, 0 when masked out) or ``v2``
    (NAVSIM v2: raw progress over the best progress masked by NC, DAC, DDC and TLC, clipped).
    EPDMS always uses v2's rule; the per-step reward and PDM-Closed's proposal ranking use v2's."""
    reward: Literal["pdms", "epdms"] = "pdms"
    """Which score the per-step reward follows (see docs/envs/driving.md)."""
    terminate_on_failure: bool = True
    """End the episode on an at-fault collision or leaving the drivable area (and running a red
    light when ``reward="epdms"``): the score's multipliers are zero from then on."""
    privileged: tuple[str, ...] = ()
    """Extra observation keys with an expert's action (``pdm_closed``, ``log_replay``; in plan mode
    also ``pdm_closed_meta``: PDM-Closed's plan as the nearest meta action, ``[lateral,
    longitudinal]`` indices), for the expert baselines and dataset export; never give them to a
    learning policy."""
    max_agents: int = 128
    max_lights: int = 32
    max_lanes: int = 64
    max_lane_samples: int = 256
    asset_cache_size: int = 256
    """Scenes whose rasters and derived data stay in memory."""

    def __post_init__(self) -> None:
        self.obs_keys = tuple(self.obs_keys)
        self.privileged = tuple(self.privileged)
        if self.action_mode not in ("control", "plan"):
            raise ValueError(f"action_mode must be 'control' or 'plan', got {self.action_mode!r}")
        if self.action_space not in ("box", "text"):
            raise ValueError(f"action_space must be 'box' or 'text', got {self.action_space!r}")
        if self.action_space == "text" and self.action_mode != "plan":
            raise ValueError(
                "action_space='text' writes plans: add action_mode='plan' (omnigym/DrivingPlan-v0 and "
                "omnigym/DrivingVLM-v0 are plan-mode envs)"
            )
        if not math.isfinite(self.invalid_action_penalty):
            raise ValueError(f"invalid_action_penalty must be finite, got {self.invalid_action_penalty}")
        if self.traffic not in ("log", "idm", "learned"):
            raise ValueError(f"traffic must be 'log', 'idm' or 'learned', got {self.traffic!r}")
        if self.traffic == "learned" and self.traffic_model is None and not self.traffic_model_path:
            raise ValueError("traffic='learned' needs traffic_model_path (a saved traffic world model)")
        if self.traffic_model_path and self.traffic != "learned":
            raise ValueError(f"traffic_model_path is used only with traffic='learned', not {self.traffic!r}")
        if self.navsim_version not in ("v1", "v2"):
            raise ValueError(f"navsim_version must be 'v1' or 'v2', got {self.navsim_version!r}")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        if self.reward not in ("pdms", "epdms"):
            raise ValueError(f"reward must be 'pdms' or 'epdms', got {self.reward!r}")
        if not 1 <= self.replan_every <= 40:
            raise ValueError(f"replan_every must be in 1..40 steps, got {self.replan_every}")
        if self.num_scenes < 1:
            raise ValueError(f"num_scenes must be >= 1, got {self.num_scenes}")
        unknown = [p for p in self.privileged if p not in PRIVILEGED]
        if unknown:
            raise ValueError(f"privileged keys {unknown} unknown; choose from {PRIVILEGED}")
        if "pdm_closed_meta" in self.privileged and self.action_mode != "plan":
            raise ValueError("privileged key 'pdm_closed_meta' (meta actions) needs action_mode='plan'")
        if self.image_size < 8 or self.image_meters <= 0:
            raise ValueError("image_size must be >= 8 pixels and image_meters > 0")
        if self.image_channels not in (1, 3):
            raise ValueError(f"image_channels must be 1 or 3, got {self.image_channels}")
        scene_fields = {f.name for f in fields(SceneConfig)}
        bad = sorted(set(self.scene) - scene_fields)
        if bad:
            raise ValueError(f"unknown scene settings {bad}; SceneConfig has {sorted(scene_fields)}")
        self.observation  # noqa: B018  (validates the observation settings now)

    def make_traffic_model(self) -> Any:
        """The ``agents.TrafficModel`` a simulator should use, or None for log replay and IDM.

        ``traffic_model`` when set; with ``traffic="learned"``, fresh agents of the world model
        saved at ``traffic_model_path`` (loaded per simulator: the agents hold per-slot state).
        """
        if self.traffic_model is not None or self.traffic != "learned":
            return self.traffic_model
        # The traffic world model (omnigym.world_models.driving), found by name: envs import no world model.
        return ENV_BACKENDS.build("learned_traffic", str(self.traffic_model_path))

    @property
    def observation(self) -> ObservationConfig:
        """The observation settings."""
        return ObservationConfig(
            keys=self.obs_keys,
            num_agents=self.num_agents_obs,
            num_route_points=self.num_route_points,
            num_lanes=self.num_lanes_obs,
            num_lane_points=self.num_lane_points,
            num_lights=self.num_lights_obs,
        )

    @property
    def scene_config(self) -> SceneConfig:
        """The procedural scene settings: the split's preset (``hard``), then ``scene``'s overrides."""
        preset = HARD_SCENES if self.split == "hard" else {}
        return SceneConfig(**{**preset, **self.scene})
