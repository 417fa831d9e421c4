"""Policy-loss building blocks of the GRPO family and decoupled (asynchronous) PPO: pure tensor functions.

* :func:`clipped_surrogate` (with clip-higher and dual clip) and :func:`k3_kl`.
* :func:`aggregation_weights` / :func:`aggregate`: per-token losses to one scalar, §0.5.
* DAPO's :func:`overlong_penalty` and :func:`informative_groups` (dynamic sampling), §3.2–3.3.
* AReaL's :func:`decoupled_ppo_loss` and :func:`staleness_capacity`, A-3PO's :func:`a3po_alpha` and
  :func:`approximate_proximal_logprob`, §5.2–5.4.

Loss functions keep gradients and return per-element losses (to be minimised); bookkeeping helpers run
without gradient.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "AGGREGATIONS",
    "a3po_alpha",
    "aggregate",
    "aggregation_weights",
    "approximate_proximal_logprob",
    "clipped_surrogate",
    "decoupled_ppo_loss",
    "informative_groups",
    "k3_kl",
    "overlong_penalty",
    "staleness_capacity",
]

AGGREGATIONS = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
"""Loss aggregation modes (verl ``loss_agg_mode`` names)."""


def clipped_surrogate(
    ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float, dual_clip: float | None = None
) -> Tensor:
    """PPO's clipped surrogate per element (a loss to minimise).

    ``max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high))``; ``eps_high > eps_low`` is DAPO's
    clip-higher. The gradient flows only where the unclipped term is active. With ``dual_clip = c > 1``
    (verl ``clip_ratio_c``, AReaL ``c_clip``) the loss of negative-advantage elements is also capped at
    ``-A * c``, bounding it when the ratio explodes.

    Args:
        ratio: ``pi_theta / pi_old``. Shape: [B, L] (anything broadcastable with ``advantages``).
        advantages: Shape: [B, 1] or [B, L].
        eps_low: lower clip range (ratio >= 1 - eps_low).
        eps_high: upper clip range (ratio <= 1 + eps_high).
        dual_clip: the cap ``c`` for ``A < 0``, or None.

    Returns:
        per-element loss, broadcast shape of the inputs.
    """
    loss = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * dual_clip), loss)
    return loss


def k3_kl(logprob: Tensor, ref_logprob: Tensor, clamp: float = 20.0) -> Tensor:
    """Schulman's k3 estimate of KL(pi_theta || pi_ref) per sampled token.

    ``k3 = exp(x) - x - 1`` with ``x = ref_logprob - logprob``: unbiased, non-negative, low variance (GRPO's
    estimator). Like verl, ``x`` is clamped to ``[-clamp, clamp]`` and the result to ``[-10, 10]``.

    Args:
        logprob: log pi_theta(a_t). Shape: [B, L].
        ref_logprob: log pi_ref(a_t). Shape: [B, L].
        clamp: bound on ``|x|``.

    Returns:
        per-token k3. Shape: [B, L].
    """
    x = (ref_logprob - logprob).clamp(-clamp, clamp)
    return (x.exp() - x - 1.0).clamp(-10.0, 10.0)


def _dense_index(ids: Tensor) -> tuple[Tensor, int]:
    """Dense index ``0..S-1`` for arbitrary labels. Shape: [R] -> ([R], S)."""
    _, index = torch.unique(ids, return_inverse=True)
    return index, (int(index.max()) + 1 if index.numel() else 0)


@torch.no_grad()
def aggregation_weights(
    mask: Tensor, sequence_ids: Tensor, mode: str, max_length: int | None = None
) -> Tensor:
    """Weights that turn per-part losses into one scalar: ``sum(weights * loss)``.

    With ``n_s`` the valid parts of sequence ``s`` (summed over all its rows) and ``S`` the number of
    sequences with ``n_s > 0`` (empty sequences are not counted, rule b):

    * ``"seq-mean-token-mean"`` (GRPO): ``1 / (S * n_s)``;
    * ``"token-mean"`` (DAPO, PPO): ``1 / sum_s n_s``;
    * ``"seq-mean-token-sum"``: ``1 / S``;
    * ``"seq-mean-token-sum-norm"`` (Dr. GRPO): ``1 / (S * max_length)``, a constant normaliser.

    A sequence may span several rows (a multi-step episode whose steps each have ``L`` parts). Compute the
    weights **once over the whole optimizer-step batch** and slice them with the data: every minibatch then
    uses the batch's normalisers, the minibatch losses add up to the full-batch aggregate, and the result does
    not depend on how the batch is split (rule a; TRL's ``bnpo`` gets this wrong by normalising locally).

    Args:
        mask: which parts count. Shape: [R, L] (any trailing dims).
        sequence_ids: the sequence (response or episode) of each row; any integer labels. Shape: [R].
        mode: one of :data:`AGGREGATIONS`.
        max_length: ``L_max`` for ``"seq-mean-token-sum-norm"``.

    Returns:
        float weights, 0 where ``mask`` is False. Shape: like ``mask``.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {mode!r}; expected one of {AGGREGATIONS}")
    if mode == "seq-mean-token-sum-norm" and (max_length is None or max_length <= 0):
        raise ValueError("aggregation 'seq-mean-token-sum-norm' needs a positive max_length (L_max)")
    if mask.dim() < 1 or sequence_ids.shape != mask.shape[:1]:
        raise ValueError(
            f"sequence_ids must be [R] for mask [R, ...], got {sequence_ids.shape}, {mask.shape}"
        )
    m = mask.to(torch.get_default_dtype() if not mask.is_floating_point() else mask.dtype)
    m = (m != 0).to(m.dtype)
    if m.numel() == 0:
        return m
    index, num_sequences = _dense_index(sequence_ids)
    per_row = m.reshape(m.shape[0], -1).sum(1)
    n = torch.zeros(num_sequences, dtype=m.dtype, device=m.device).index_add_(0, index, per_row)
    num_nonempty = (n > 0).sum().clamp_min(1).to(m.dtype)
    if mode == "token-mean":
        row_scale = (1.0 / n.sum().clamp_min(1.0)).expand(m.shape[0])
    elif mode == "seq-mean-token-mean":
        row_scale = 1.0 / (num_nonempty * n.clamp_min(1.0))[index]
    elif mode == "seq-mean-token-sum":
        row_scale = (1.0 / num_nonempty).expand(m.shape[0])
    else:
        row_scale = (1.0 / (num_nonempty * float(max_length))).expand(m.shape[0])  # type: ignore[arg-type]
    return m * row_scale.reshape(-1, *([1] * (m.dim() - 1)))


def aggregate(
    loss: Tensor, mask: Tensor, sequence_ids: Tensor, mode: str, max_length: int | None = None
) -> Tensor:
    """Aggregate per-part losses of a whole batch into a scalar: ``sum(aggregation_weights(...) * loss)``.

    Masked-out entries are zeroed before weighting, so NaN/inf in padding cannot leak into the result.

    Args:
        loss: per-part loss (keeps its gradient). Shape: [R, L].
        mask: Shape: [R, L].
        sequence_ids: Shape: [R].
        mode: one of :data:`AGGREGATIONS`.
        max_length: ``L_max`` for ``"seq-mean-token-sum-norm"``.

    Returns:
        scalar loss.
    """
    weights = aggregation_weights(mask, sequence_ids, mode, max_length).to(loss.dtype)
    return (weights * torch.where(mask.bool(), loss, torch.zeros_like(loss))).sum()


@torch.no_grad()
def overlong_penalty(lengths: Tensor, max_length: int, cache_length: int) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al., 2025, §3.2), added to the reward.

    0 up to ``max_length - cache_length`` tokens, then a linear ramp down to -1 at ``max_length``, and -1
    beyond it.

    Args:
        lengths: generated length of each response in tokens. Shape: [M].
        max_length: ``L_max``, the hard generation cap.
        cache_length: ``L_cache``, the punishment buffer (``0 <= L_cache <= L_max``).

    Returns:
        penalty in ``[-1, 0]``. Shape: [M].
    """
    if not 0 <= cache_length <= max_length:
        raise ValueError(f"need 0 <= cache_length <= max_length, got {cache_length}, {max_length}")
    lengths = lengths.to(torch.get_default_dtype() if not lengths.is_floating_point() else lengths.dtype)
    expected = max_length - cache_length
    ramp = ((expected - lengths) / max(cache_length, 1)).clamp(-1.0, 0.0)
    return torch.where(lengths > max_length, torch.full_like(lengths, -1.0), ramp)


@torch.no_grad()
def informative_groups(metric: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO dynamic sampling's filter (§3.3): which responses belong to groups worth training on.

    A group is kept when its metric (accuracy by default, not the shaped reward) is not constant, i.e.
    ``std > 0``, or when it has a single member (verl's rule). Constant groups have zero advantage and only
    dilute the token-mean denominator. NaN metrics are ignored when judging a group.

    Args:
        metric: filter metric per response. Shape: [M].
        group_ids: group of each response. Shape: [M].

    Returns:
        True for the rows of kept groups. Shape: [M], bool.
    """
    if metric.numel() == 0:
        return torch.zeros(metric.shape, dtype=torch.bool, device=metric.device)
    index, num_groups = _dense_index(group_ids)
    metric = metric.to(torch.float64)
    valid = ~torch.isnan(metric)
    inf = torch.full((num_groups,), torch.inf, dtype=metric.dtype, device=metric.device)
    hi = (-inf).scatter_reduce(0, index, torch.where(valid, metric, -torch.inf), "amax")
    lo = inf.scatter_reduce(0, index, torch.where(valid, metric, torch.inf), "amin")
    size = torch.zeros(num_groups, dtype=torch.long, device=metric.device).index_add_(
        0, index, torch.ones_like(index)
    )
    return ((hi > lo) | (size == 1))[index]


@torch.no_grad()
def a3po_alpha(current_version: int | Tensor, behaviour_version: Tensor) -> Tensor:
    """A-3PO's interpolation weight of the proximal policy (Li et al., 2025).

    With ``v_prox = v_theta - 1``: ``alpha = (v_prox - v_behave) / (v_theta - v_behave)``, 0 where
    ``v_theta - v_behave <= 0`` (fresh tokens) or ``v_behave < 0`` (prompt tokens), clipped to ``[0, 1]``.

    Args:
        current_version: the trainer's policy version ``v_theta`` (scalar or broadcastable tensor).
        behaviour_version: version that generated each token (-1 for prompt tokens). Shape: [B, L].

    Returns:
        alpha, default float dtype. Shape: like ``behaviour_version``.
    """
    dtype = torch.get_default_dtype()
    behaviour = behaviour_version.to(dtype)
    current = torch.as_tensor(current_version, device=behaviour.device).to(dtype)
    gap = current - behaviour
    ok = (gap > 0) & (behaviour >= 0)
    alpha = (current - 1.0 - behaviour) / torch.where(ok, gap, torch.ones_like(gap))
    return torch.where(ok, alpha, torch.zeros_like(alpha)).clamp(0.0, 1.0)


def approximate_proximal_logprob(
    behaviour_logprob: Tensor,
    current_logprob: Tensor,
    alpha: Tensor,
    method: Literal["loglinear", "linear"] = "loglinear",
) -> Tensor:
    """A-3PO's proximal log-probability without an extra forward pass.

    * ``"loglinear"`` (recommended): ``lp_behav + alpha * (sg(lp_theta) - lp_behav)``;
    * ``"linear"``: ``log((1 - alpha) * pi_behav + alpha * sg(pi_theta) + 1e-10)``.

    ``current_logprob`` is detached here so gradients flow only through the trust-region ratio's numerator.

    Args:
        behaviour_logprob: log pi_behav(a_t). Shape: [B, L].
        current_logprob: log pi_theta(a_t) of the current forward pass. Shape: [B, L].
        alpha: from :func:`a3po_alpha`. Shape: [B, L] (broadcastable).
        method: the interpolation.

    Returns:
        approximate log pi_prox(a_t), without gradient. Shape: [B, L].
    """
    current = current_logprob.detach()
    behaviour = behaviour_logprob.detach()
    alpha = alpha.to(current.dtype)
    if method == "loglinear":
        return behaviour + alpha * (current - behaviour)
    if method == "linear":
        return torch.log((1.0 - alpha) * behaviour.exp() + alpha * current.exp() + 1e-10)
    raise ValueError(f"method must be 'loglinear' or 'linear', got {method!r}")


def _finite_or_zero(x: Tensor) -> Tensor:
    """Non-finite log-ratios (e.g. -inf - -inf on padding) become 0, as in AReaL."""
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


def decoupled_ppo_loss(
    logprob: Tensor,
    proximal_logprob: Tensor,
    behaviour_logprob: Tensor,
    advantages: Tensor,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
    weight_cap: float | None = None,
    cap_mode: Literal["mask", "clamp"] = "mask",
) -> tuple[Tensor, Tensor]:
    """AReaL's decoupled PPO objective per element (Fu et al., 2025).

    ``w = sg(pi_prox / pi_behav)`` corrects for the (stale) behaviour policy; ``u = pi_theta / pi_prox`` is
    the trust-region ratio, clipped around the recent proximal policy: ``loss = w * clipped_surrogate(u, A)``.
    With ``proximal == behaviour`` this is the ordinary clipped surrogate.

    Args:
        logprob: log pi_theta(a_t) (keeps its gradient). Shape: [B, L].
        proximal_logprob: log pi_prox(a_t) (detached here). Shape: [B, L].
        behaviour_logprob: log pi_behav(a_t). Shape: [B, L].
        advantages: Shape: [B, 1] or [B, L].
        eps_low: lower clip range of ``u``.
        eps_high: upper clip range of ``u``.
        dual_clip: dual-clip cap ``c > 1`` for negative advantages, or None.
        weight_cap: staleness filter on ``w`` (AReaL's token-level rejection sampling), or None.
        cap_mode: ``"mask"`` zeroes the loss of elements with ``w > weight_cap`` (callers keep the original
            valid-token count as the denominator, so the rest is not re-inflated); ``"clamp"`` clamps ``w``.

    Returns:
        per-element loss and the weights ``w`` actually applied (0 where masked), for logging.
        Shape: broadcast of the inputs, each.
    """
    proximal = proximal_logprob.detach()
    w = _finite_or_zero(proximal - behaviour_logprob.detach()).exp()
    if weight_cap is not None:
        if cap_mode == "mask":
            w = torch.where(w > weight_cap, torch.zeros_like(w), w)
        elif cap_mode == "clamp":
            w = w.clamp(max=weight_cap)
        else:
            raise ValueError(f"cap_mode must be 'mask' or 'clamp', got {cap_mode!r}")
    u = _finite_or_zero(logprob - proximal).exp()
    return w * clipped_surrogate(u, advantages, eps_low, eps_high, dual_clip), w


def staleness_capacity(
    batch_size: int,
    max_staleness: int,
    version: int,
    accepted: int,
    running: int,
    max_concurrent: int | None = None,
) -> int:
    """How many more rollouts may be submitted now (AReaL's staleness manager).

    ``min((eta + v + 1) * B - (accepted + running), max_concurrent - running)``: no consumed sample is more
    than ``eta`` versions older than the trainer. Submit only while the result is positive (it may be
    negative). ``eta = 0`` admits only the batch the current version will consume (synchronous training).

    Args:
        batch_size: B, rollouts consumed per training step.
        max_staleness: eta (AReaL ``max_head_offpolicyness``).
        version: the trainer's current version v.
        accepted: rollouts finished and accepted so far.
        running: rollouts in flight.
        max_concurrent: cap on rollouts in flight, or None for no cap.

    Returns:
        the capacity.
    """
    if batch_size < 1 or max_staleness < 0 or version < 0 or accepted < 0 or running < 0:
        raise ValueError("batch_size must be >= 1 and the other counts >= 0")
    capacity = (max_staleness + version + 1) * batch_size - (accepted + running)
    if max_concurrent is not None:
        capacity = min(capacity, max_concurrent - running)
    return capacity
