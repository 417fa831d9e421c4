"""The graphs ``omnigym export`` traces: a policy's deterministic action as a function of tensors.

A :class:`PolicyGraph` wraps a copy of a policy in a module whose ``forward`` takes one tensor per
observation key (raw, as the env gives it) and returns the mode of the action, so what the
tracer records is the policy's own code, observation normalisation included:

* :class:`FeedForwardGraph` (``mlp``, ``cnn``, ``one_step_flow``, any
  :class:`~omnigym.policies.feedforward.FeedForwardPolicy`): ``act(obs, deterministic=True)``,
  one observation ``[B, ...]`` per key in, one action ``[B, *action_shape]`` (``[B]`` for
  Discrete) out.
* :class:`ChunkGraph` (``flow``, ``meanflow``, ``diffusion``): the chunk sampler unrolled for its
  fixed number of steps, an observation history ``[B, n_obs_steps, ...]`` per key and the
  sampler's initial ``noise [B, horizon, action_dim]`` in, the chunk ``[B, horizon,
  *action_shape]`` out. The noise is an input so that the graph is a deterministic function; the
  policy's own deterministic acting feeds its fixed noise (written into the sidecar). The
  receding horizon (which slice of the chunk to execute, when to re-plan) stays with the caller.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.policy import Policy, obs_to_torch

if TYPE_CHECKING:
    from omnigym.policies.chunking.encoders import ImageEncoder

EXPORTABLE = "mlp, cnn, one_step_flow (feed-forward policies) and flow, meanflow, diffusion (action chunks)"
"""What ``omnigym export`` handles, for refusals."""
CHUNK_TYPES = frozenset({"flow", "meanflow", "diffusion"})
"""Action-chunk policy types whose samplers unroll into a graph (not ``vla``, ``diffusion_planner``)."""
BATCH = "batch"
"""The name of the dynamic batch axis in the input and output shapes."""


class UnsupportedPolicyError(ValueError):
    """A policy ``omnigym export`` cannot turn into a graph; the message says why and what to do."""


@dataclass(frozen=True)
class TensorSpec:
    """One named input or output of an exported graph.

    Attributes:
        name: the graph's name for it (an observation key, ``noise``, ``action``...).
        shape: its shape, :data:`BATCH` for the dynamic batch axis.
        dtype: its NumPy dtype name (``float32``, ``uint8``, ``int64``).
        obs_key: the observation key it carries; None for the noise and the output.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    obs_key: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The spec as a JSON-ready dict (what the sidecar lists)."""
        out: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.obs_key is not None:
            out["obs_key"] = self.obs_key
        return out


def unsupported_reason(policy_type: str, policy_cls: type | None = None) -> str | None:
    """Why a policy type cannot be exported (None: it can), known before building or loading it.

    Args:
        policy_type: the registered name (``mlp``, ``vlm``...).
        policy_cls: its class, when known; a feed-forward subclass is exportable under any name.
    """
    from omnigym.policies.feedforward import FeedForwardPolicy

    if policy_cls is not None and issubclass(policy_cls, FeedForwardPolicy):
        return None
    if policy_type in CHUNK_TYPES:
        return None
    if policy_type == "vlm":
        return (
            "policy 'vlm' generates text with a language model, which has no fixed-size graph; deploy its "
            f"Hugging Face model directory with the model's own tools instead (omnigym export handles "
            f"{EXPORTABLE})"
        )
    if policy_type == "vla":
        return (
            "policy 'vla' encodes text and images with a vision-language backbone, which omnigym export does "
            f"not trace; export a flow or diffusion policy trained on the same data instead ({EXPORTABLE})"
        )
    return (
        f"policy {policy_type!r} is not one omnigym export can trace (it handles {EXPORTABLE}); "
        "train one of those on the task (e.g. omnigym bc, omnigym train) and export it"
    )


def build_graph(policy: Policy) -> PolicyGraph:
    """The graph of ``policy``'s deterministic action.

    Raises:
        UnsupportedPolicyError: the policy type, its settings or an observation key it reads
            cannot be exported; the message names why and what to do.
    """
    from omnigym.policies.chunking.policy import ChunkPolicy
    from omnigym.policies.feedforward import FeedForwardPolicy

    reason = unsupported_reason(type(policy).name, type(policy))
    if reason is not None:
        raise UnsupportedPolicyError(reason)
    if isinstance(policy, FeedForwardPolicy):
        return FeedForwardGraph(policy)
    if isinstance(policy, ChunkPolicy) and type(policy).name in CHUNK_TYPES:
        if policy.rl_chain and policy.frozen_model is not None:
            raise UnsupportedPolicyError(
                f"this {policy.name} policy was fine-tuned with a frozen chain prefix "
                "(policy.frozen_chain_prefix): its deterministic sampler runs two networks from its fixed "
                "noise only; export the policy before fine-tuning, or fine-tune with ft_denoising_steps=0"
            )
        return ChunkGraph(policy)
    raise UnsupportedPolicyError(
        f"policy {type(policy).name!r} ({type(policy).__name__}) is not one omnigym export can trace; "
        f"it handles {EXPORTABLE}"
    )


class PolicyGraph(nn.Module):
    """A policy's deterministic action as a function of named tensors (see the module doc).

    The policy is deep-copied (exporting never changes the caller's policy) and kept outside the
    module tree: ``torch.jit.trace`` reads every attribute of every submodule, and some policy
    properties raise when read. Its children are registered instead, so the traced graph holds
    each weight once (one initialiser shared by every unrolled sampler step).

    Attributes:
        inputs: the graph's inputs, in ``forward``'s order.
        output_name: the name of its one output.
    """

    kind: ClassVar[str] = ""
    output_name: ClassVar[str] = "action"
    inputs: list[TensorSpec]
    policy: Any
    """The exported copy of the policy (Any: each graph reads its kind's own attributes)."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        policy_copy = copy.deepcopy(policy).cpu().eval()
        object.__setattr__(self, "policy", policy_copy)  # not a submodule (see the class doc)
        self.weights = nn.ModuleList(module for _, module in policy_copy.named_children())
        self.keys: tuple[str, ...] = ()
        self.inputs = []

    def _check_keys(self, keys: tuple[str, ...]) -> None:
        """Refuse observation keys that are not numeric arrays (text, nested dicts)."""
        space = self.policy.observation_space
        for key in keys:
            if not isinstance(space.spaces.get(key), spaces.Box):
                kind = type(space.spaces.get(key)).__name__
                raise UnsupportedPolicyError(
                    f"the policy reads observation {key!r}, a {kind} space; exported graphs take numeric "
                    "(Box) arrays only: set policy.obs_keys to Box keys"
                )
        self.keys = keys

    def sample_inputs(self, batch: int, seed: int) -> list[np.ndarray]:
        """Valid raw inputs for ``batch`` rows, sampled from the observation space with ``seed``."""
        raise NotImplementedError

    def reference(self, policy: Policy, inputs: list[np.ndarray]) -> np.ndarray:
        """What the torch ``policy`` itself computes from ``inputs`` (the graph's expected output)."""
        raise NotImplementedError

    def metadata(self) -> dict[str, Any]:
        """What a deployer needs to know beyond the tensors (written into the sidecar)."""
        return {"kind": self.kind}

    def _observations(self, batch: int, seed: int, steps: int | None) -> list[np.ndarray]:
        """Per key, ``batch`` (times ``steps``) observations sampled from its space, stacked."""
        out = []
        for i, key in enumerate(self.keys):
            space = copy.deepcopy(self.policy.observation_space.spaces[key])
            space.seed(seed + i)
            rows = np.stack([space.sample() for _ in range(batch * (steps or 1))])
            out.append(rows.reshape(batch, steps, *rows.shape[1:]) if steps else rows)
        return out


class FeedForwardGraph(PolicyGraph):
    """``act(obs, deterministic=True).action`` of a feed-forward policy.

    That is the Gaussian's mean, the squashed mean, the deterministic head's action or the most
    likely discrete action.
    """

    kind = "feedforward"

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        config = self.policy.config
        keys = (*getattr(config, "obs_keys", ()), *getattr(config, "state_keys", ()))
        self._check_keys(tuple(dict.fromkeys(keys)))
        obs_space = self.policy.observation_space
        self.inputs = [
            TensorSpec(key, (BATCH, *obs_space[key].shape), np.dtype(obs_space[key].dtype).name, key)
            for key in self.keys
        ]

    def forward(self, *obs: Tensor) -> Tensor:
        """One tensor ``[B, ...]`` per observation key, in :attr:`inputs` order -> the action."""
        with torch.no_grad():
            return self.policy.act(dict(zip(self.keys, obs, strict=True)), deterministic=True).action

    def sample_inputs(self, batch: int, seed: int) -> list[np.ndarray]:
        """One observation per row and key, sampled from the observation space."""
        return self._observations(batch, seed, None)

    def reference(self, policy: Policy, inputs: list[np.ndarray]) -> np.ndarray:
        """``policy.act(obs, deterministic=True).action`` as NumPy."""
        obs = obs_to_torch(dict(zip(self.keys, inputs, strict=True)), policy.device)
        with torch.no_grad():
            return policy.act(obs, deterministic=True).action.cpu().numpy()

    def metadata(self) -> dict[str, Any]:
        """The head's kind and whether observations are normalised inside the graph."""
        config = self.policy.config
        normalizer = getattr(self.policy, "obs_rms", None)
        return {
            "kind": self.kind,
            "action_head": getattr(config, "action_head", None),
            "obs_normalization": (
                {"type": "running_mean_std", "clip": config.obs_clip, "baked_in": True}
                if normalizer is not None
                else None
            ),
        }


class ChunkGraph(PolicyGraph):
    """An action-chunk policy's sampler from explicit initial noise (``sample_chunks(history, noise=...)``).

    Vector keys are min-max normalised inside the graph, images scaled and centre-cropped, the
    chunk unnormalised and clamped to the action bounds, as the policy does.
    """

    kind = "action_chunk"
    output_name = "action_chunk"

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        chunk_policy: Any = self.policy
        self._check_keys((*chunk_policy.state_keys, *chunk_policy.image_keys))
        cfg = chunk_policy.config
        obs_space = chunk_policy.observation_space
        self.inputs = [
            TensorSpec(k, (BATCH, cfg.n_obs_steps, *obs_space[k].shape), np.dtype(obs_space[k].dtype).name, k)
            for k in self.keys
        ]
        noise_name = "noise" if "noise" not in self.keys else "initial_noise"
        self.inputs.append(TensorSpec(noise_name, (BATCH, cfg.horizon, chunk_policy.action_dim), "float32"))
        if chunk_policy.image_keys:
            from omnigym.policies.chunking.encoders import ImageEncoder

            height, width = obs_space[chunk_policy.image_keys[0]].shape[:2]
            for module in self.policy.modules():
                if isinstance(module, ImageEncoder):
                    _static_centre_crop(module, height, width)

    def forward(self, *tensors: Tensor) -> Tensor:
        """Observation histories ``[B, To, ...]`` per key, then the noise -> the chunk."""
        history = dict(zip(self.keys, tensors[:-1], strict=True))
        return self.policy.sample_chunks(history, noise=tensors[-1])[0]

    def sample_inputs(self, batch: int, seed: int) -> list[np.ndarray]:
        """Histories sampled from the observation space, and standard normal noise (both seeded)."""
        steps = self.policy.config.n_obs_steps
        noise_shape = (batch, *(int(d) for d in self.inputs[-1].shape[1:]))
        noise = np.random.default_rng(seed).standard_normal(noise_shape).astype(np.float32)
        return [*self._observations(batch, seed, steps), noise]

    def reference(self, policy: Policy, inputs: list[np.ndarray]) -> np.ndarray:
        """``policy.sample_chunks(history, noise=noise)``'s chunks as NumPy."""
        chunk_policy: Any = policy
        history = obs_to_torch(dict(zip(self.keys, inputs[:-1], strict=True)), policy.device)
        noise = torch.from_numpy(inputs[-1]).to(policy.device)
        return chunk_policy.sample_chunks(history, noise=noise)[0].cpu().numpy()

    def metadata(self) -> dict[str, Any]:
        """The receding horizon, the sampler and the noise that reproduces deterministic acting."""
        chunk_policy: Any = self.policy
        cfg = chunk_policy.config
        start = cfg.n_obs_steps - 1
        sampler = getattr(cfg, "integrator", None) or getattr(cfg, "sampler", None) or "meanflow"
        return {
            "kind": self.kind,
            "horizon": cfg.horizon,
            "n_obs_steps": cfg.n_obs_steps,
            "n_action_steps": cfg.n_action_steps,
            "execute_slice": [start, start + cfg.n_action_steps],
            "temporal_ensemble": cfg.temporal_ensemble,
            "sampler": sampler,
            "num_inference_steps": cfg.num_inference_steps,
            "obs_normalization": {"type": "min_max", "keys": list(chunk_policy.state_keys), "baked_in": True},
            "fixed_noise": chunk_policy.fixed_noise.cpu().tolist(),
        }


def _static_centre_crop(encoder: ImageEncoder, height: int, width: int) -> None:
    """Make an image encoder's acting-time centre crop a slice of fixed bounds.

    The encoder computes the crop from the input's shape, which the ONNX tracer hands over as
    tensors (``round`` fails on them); the image size is fixed by the observation space, so the
    bounds are constants. Only the exported copy is changed; the verification compares against
    the original encoder.
    """
    ratio = float(encoder.crop_ratio)
    if ratio >= 1:
        return
    h, w = max(1, round(height * ratio)), max(1, round(width * ratio))
    top, left = (height - h) // 2, (width - w) // 2

    def crop(x: Tensor, random: bool = False) -> Tensor:
        return x[:, :, top : top + h, left : left + w]

    object.__setattr__(encoder, "crop", crop)


def json_bounds(values: np.ndarray) -> list[Any]:
    """An array of bounds as nested lists, with None for an infinite (unbounded) entry."""
    flat = [
        float(v) if math.isfinite(float(v)) else None for v in np.asarray(values, dtype=np.float64).ravel()
    ]
    return np.array(flat, dtype=object).reshape(np.shape(values)).tolist()
