"""Names -> classes for policies, algorithms and world models, imported on first use.

Configs pick a class by its registered ``type:`` name, never by import path. Entries are
``"module:Class"`` strings so that a heavy dependency (transformers, diffusers) is only imported
when its class is used. Third-party packages add entries through the Python entry-point groups
``omnigym.policies``, ``omnigym.algorithms`` and ``omnigym.world_models``.

:data:`ENV_BACKENDS` maps names to ``"module:function"`` strings the same way: the functions
that build an env, or a part of one, in another room (the adapter for other packages' envs,
Isaac Lab, a world model standing in for an env, the driving env's learned traffic). Whoever
needs one looks it up by name, so ``platform/vec_env.py`` imports no env family or world model
and no env imports a world model (``tests/test_layers.py``).
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any


class RegistryError(KeyError):
    """An unknown name, or a name registered twice."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry:
    """A lazy mapping from names to classes (or, for :data:`ENV_BACKENDS`, functions).

    Args:
        kind: what the entries are ("policy", "algorithm", ...), used in error messages.
        entry_point_group: Python entry-point group scanned for third-party entries.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self._targets: dict[str, str] = {}
        self._loaded: dict[str, type[Any]] = {}
        self._entry_point_group = entry_point_group
        self._scanned = entry_point_group is None

    def register(self, name: str, target: str | type) -> None:
        """Register ``name`` for a ``"module:Class"`` string or a class."""
        if name in self._targets or name in self._loaded:
            raise RegistryError(f"{self.kind} {name!r} is already registered")
        if isinstance(target, str):
            if ":" not in target:
                raise ValueError(f"{self.kind} target must look like 'module:Class', got {target!r}")
            self._targets[name] = target
        else:
            self._loaded[name] = target

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._scan_entry_points()
        return sorted(set(self._targets) | set(self._loaded))

    def target(self, name: str) -> str | None:
        """The ``"module:Class"`` string registered as ``name`` (None for a class registered as such)."""
        self._scan_entry_points()
        if name not in self._targets and name not in self._loaded:
            raise RegistryError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names()) or '(none)'}")
        return self._targets.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def get(self, name: str) -> type[Any]:
        """The class registered as ``name``; imports it on first use."""
        self._scan_entry_points()
        if name in self._loaded:
            return self._loaded[name]
        if name not in self._targets:
            raise RegistryError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names()) or '(none)'}")
        module_name, _, attr = self._targets[name].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ImportError(f"{self.kind} {name!r} needs a missing dependency: {exc}") from exc
        cls = getattr(module, attr)
        self._loaded[name] = cls
        return cls

    def build(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Instantiate the class registered as ``name``."""
        return self.get(name)(*args, **kwargs)

    def _scan_entry_points(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        for ep in metadata.entry_points(group=self._entry_point_group or ""):
            if ep.name not in self._targets and ep.name not in self._loaded:
                self._targets[ep.name] = ep.value


POLICIES = Registry("policy", "omnigym.policies")
ALGORITHMS = Registry("algorithm", "omnigym.algorithms")
WORLD_MODELS = Registry("world model", "omnigym.world_models")
ENV_BACKENDS = Registry("env backend")
"""Functions that build envs or parts of them, by name (module docstring); no entry-point group."""

# Built-in entries. One line per class; the module is imported only when the name is used.
POLICIES.register("mlp", "omnigym.policies.mlp:MLPPolicy")
POLICIES.register("cnn", "omnigym.policies.cnn:CNNPolicy")
POLICIES.register("vlm", "omnigym.policies.vlm.policy:VLMPolicy")
POLICIES.register("random", "omnigym.policies.baselines:RandomPolicy")
POLICIES.register("constant_velocity", "omnigym.envs.driving.experts:ConstantVelocityPolicy")
POLICIES.register("pdm_closed", "omnigym.envs.driving.experts:PDMClosedPolicy")
POLICIES.register("log_replay", "omnigym.envs.driving.experts:LogReplayPolicy")
POLICIES.register("pdm_closed_meta", "omnigym.envs.driving.experts:PDMClosedMetaPolicy")
POLICIES.register("pusht_expert", "omnigym.envs.manipulation.experts:PushTExpert")
POLICIES.register("gym_pusht_expert", "omnigym.envs.manipulation.experts:GymPushTExpert")
POLICIES.register("reach_expert", "omnigym.envs.manipulation.experts:ReachExpert")
POLICIES.register("pushcube_expert", "omnigym.envs.manipulation.experts:PushCubeExpert")
POLICIES.register("pickplace_expert", "omnigym.envs.manipulation.experts:PickPlaceExpert")
POLICIES.register("pushcube_two_stage_expert", "omnigym.envs.manipulation.experts:PushCubeTwoStageExpert")
POLICIES.register("aloha_transfer_expert", "omnigym.envs.ext.aloha_expert:AlohaTransferCubeExpert")
POLICIES.register("aloha_insertion_expert", "omnigym.envs.ext.aloha_expert:AlohaInsertionExpert")
POLICIES.register("gui_oracle", "omnigym.envs.gui.oracle:GUIOracle")
POLICIES.register("game_solver", "omnigym.envs.games.experts:GameSolver")
POLICIES.register("diffusion", "omnigym.policies.diffusion.policy:DiffusionPolicy")
POLICIES.register("flow", "omnigym.policies.flow.policy:FlowPolicy")
POLICIES.register("vla", "omnigym.policies.vla.policy:VLAPolicy")
POLICIES.register("meanflow", "omnigym.policies.flow.meanflow:MeanFlowPolicy")
POLICIES.register("diffusion_planner", "omnigym.policies.diffusion.planner:DiffusionPlanner")
POLICIES.register("one_step_flow", "omnigym.policies.flow.one_step:OneStepFlowPolicy")
POLICIES.register("noise_steering", "omnigym.policies.chunking.steered:NoiseSteeringPolicy")
POLICIES.register("hierarchical", "omnigym.policies.hierarchical.policy:HierarchicalPolicy")
POLICIES.register(
    "hierarchical_diffusion_planner", "omnigym.policies.diffusion.planner:HierarchicalDiffusionPlanner"
)
ALGORITHMS.register("ppo", "omnigym.platform.algorithms.ppo:PPO")
ALGORITHMS.register("grpo", "omnigym.platform.algorithms.grpo:GRPO")
ALGORITHMS.register("dr_grpo", "omnigym.platform.algorithms.grpo:DrGRPO")
ALGORITHMS.register("dapo", "omnigym.platform.algorithms.grpo:DAPO")
ALGORITHMS.register("gdpo", "omnigym.platform.algorithms.grpo:GDPO")
ALGORITHMS.register("mdpo", "omnigym.platform.algorithms.grpo:MDPO")
ALGORITHMS.register("decoupled_ppo", "omnigym.platform.algorithms.decoupled:DecoupledPPO")
ALGORITHMS.register("a3po", "omnigym.platform.algorithms.decoupled:A3PO")
ALGORITHMS.register("vtrace", "omnigym.platform.algorithms.vtrace:VTrace")
ALGORITHMS.register("vldac", "omnigym.platform.algorithms.vldac:VLDAC")
ALGORITHMS.register("sac", "omnigym.platform.algorithms.sac:SAC")
ALGORITHMS.register("bc", "omnigym.platform.algorithms.offline.bc:BC")
ALGORITHMS.register("td3bc", "omnigym.platform.algorithms.offline.td3bc:TD3BC")
ALGORITHMS.register("iql", "omnigym.platform.algorithms.offline.iql:IQL")
ALGORITHMS.register("cql", "omnigym.platform.algorithms.offline.cql:CQL")
ALGORITHMS.register("awac", "omnigym.platform.algorithms.offline.awac:AWAC")
ALGORITHMS.register("fql", "omnigym.platform.algorithms.offline.fql:FQL")
ALGORITHMS.register("wsrl", "omnigym.platform.algorithms.offline.wsrl:WSRL")
WORLD_MODELS.register("ensemble", "omnigym.world_models.ensemble:EnsembleDynamics")
WORLD_MODELS.register("traffic", "omnigym.world_models.driving:TrafficWorldModel")
WORLD_MODELS.register("diffusion", "omnigym.world_models.diffusion:DiffusionWorldModel")
WORLD_MODELS.register("rssm", "omnigym.world_models.rssm:RSSMWorldModel")
# Env backends: "module:function". `real`: one env of a Gymnasium id (other packages' envs through
# omnigym's observation adapter); `real_vector`: an env's own batched implementation (Gymnasium's
# vector entry point); `isaaclab`: an Isaac Lab task; `world_model`: a saved world model standing in
# for an env (`env.backend: world_model`); `learned_traffic`: the driving env's `traffic="learned"`.
ENV_BACKENDS.register("real", "omnigym.envs.manipulation.adapters:make_adapted_env")
ENV_BACKENDS.register("real_vector", "omnigym.envs.manipulation.adapters:make_adapted_vec_env")
ENV_BACKENDS.register("isaaclab", "omnigym.envs.manipulation.isaaclab:make_isaaclab_vec_env")
ENV_BACKENDS.register("world_model", "omnigym.world_models.env:make_world_model_vec_env")
ENV_BACKENDS.register("learned_traffic", "omnigym.world_models.driving:load_traffic_agents")
