"""Advantages for the GRPO family and off-policy actor-critics: pure tensor functions, no gradient.

* :func:`group_advantages` — group-relative advantages (GRPO, DAPO, Dr. GRPO, Flow-GRPO).
* :func:`reward_decoupled_advantages` — GDPO's per-reward normalisation.
* :func:`process_advantages` — GRPO's process supervision: normalised step rewards summed to the end
  of the episode.
* :func:`vtrace` — IMPALA's off-policy corrected value targets and advantages.
* :func:`gae` — re-exported from :mod:`omnigym.platform.returns` (its single home).

Documented choices where the reference implementations differ:

* ``eps = 1e-4`` (TRL's; verl uses 1e-6, oat/Dr. GRPO 1e-8, Flow-GRPO 1e-4).
* Sample std (Bessel, ``ddof=1``), as ``torch.std`` and the LLM trainers; ``ddof=0`` is available.
* A group of size 1 gets advantage 0 (TRL; verl would return the raw reward).
* A group whose rewards are all equal gets exactly 0 (never NaN, never round-off noise).
* NaN rewards (unscorable responses) are left out of their group's statistics and get advantage 0 (TRL).
* GDPO normalises the weighted sum over *responses* (TRL variant), not over tokens (verl variant).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from omnigym.platform.returns import gae

__all__ = [
    "ADVANTAGE_EPS",
    "gae",
    "group_advantages",
    "process_advantages",
    "reward_decoupled_advantages",
    "vtrace",
]

ADVANTAGE_EPS = 1e-4
"""Added to the std in advantage normalisation (TRL's value)."""


def _float(x: Tensor) -> Tensor:
    """``x`` as a floating tensor (integer rewards become the default float dtype)."""
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def _group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group index ``0..G-1`` for arbitrary integer labels. Shape: [M] -> ([M], G)."""
    _, index = torch.unique(group_ids, return_inverse=True)
    num_groups = int(index.max()) + 1 if index.numel() else 0
    return index, num_groups


def _std(sum_sq_dev: Tensor, count: Tensor, ddof: int) -> Tensor:
    """Standard deviation from the sum of squared deviations; 0 where ``count <= ddof``."""
    dof = count - ddof
    return torch.where(dof > 0, (sum_sq_dev / dof.clamp_min(1)).sqrt(), torch.zeros_like(sum_sq_dev))


@torch.no_grad()
def group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    scale: Literal["group", "batch", "none"] = "group",
    eps: float = ADVANTAGE_EPS,
    ddof: int = 1,
) -> Tensor:
    """Group-relative advantage of every response.

    ``A_i = (r_i - mean_g(r)) / (s + eps)`` where ``s`` is

    * ``"group"``: the std of the response's group (GRPO, DAPO);
    * ``"batch"``: the std over every scored response of the batch (Flow-GRPO; it uses ``ddof=0``);
    * ``"none"``: 1 with ``eps = 0``, i.e. ``A_i = r_i - mean_g(r)`` (Dr. GRPO).

    Degenerate cases never give NaN: a group with one scored response and a group whose scored rewards
    are all equal get exactly 0 (the TRL choice.6). NaN rewards (unscorable responses)
    are excluded from their group's mean and std and from the batch std, and get advantage 0 (TRL).

    Args:
        rewards: one scalar reward per response. Shape: [M].
        group_ids: which group (prompt) each response belongs to; any integer labels. Shape: [M].
        scale: which std divides the centred reward.
        eps: added to the std (unused with ``scale="none"``).
        ddof: delta degrees of freedom of the std (1: sample std, 0: population std).

    Returns:
        advantages, in the dtype of ``rewards`` (float). Shape: [M].
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(f"rewards and group_ids must both be [M], got {rewards.shape} and {group_ids.shape}")
    rewards = _float(rewards)
    if rewards.numel() == 0:
        return rewards.clone()
    index, num_groups = _group_index(group_ids)
    valid = ~torch.isnan(rewards)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))

    def per_group(x: Tensor) -> Tensor:
        return torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, index, x)

    count = per_group(valid.to(rewards.dtype))
    mean = per_group(r) / count.clamp_min(1)
    centred = torch.where(valid, r - mean[index], torch.zeros_like(r))
    if scale == "group":
        std = _std(per_group(centred.square()), count, ddof)[index]
        advantages = centred / (std + eps)
    elif scale == "batch":
        n = valid.sum()
        batch_mean = r.sum() / n.clamp_min(1)
        sq = torch.where(valid, (r - batch_mean).square(), torch.zeros_like(r)).sum()
        advantages = centred / (_std(sq, n.to(rewards.dtype), ddof) + eps)
    else:
        advantages = centred
    # Exact zeros (not round-off of the mean) for constant groups and groups with < 2 scored responses.
    inf = torch.full((num_groups,), torch.inf, dtype=rewards.dtype, device=rewards.device)
    hi = (-inf).scatter_reduce(0, index, torch.where(valid, r, -torch.inf), "amax")
    lo = inf.scatter_reduce(0, index, torch.where(valid, r, torch.inf), "amin")
    informative = (count >= 2) & (hi > lo)
    return torch.where(valid & informative[index], advantages, torch.zeros_like(advantages))


@torch.no_grad()
def process_advantages(
    step_rewards: Tensor,
    valid: Tensor,
    group_ids: Tensor,
    scale: Literal["group", "batch", "none"] = "group",
    eps: float = ADVANTAGE_EPS,
    ddof: int = 1,
) -> Tensor:
    """GRPO with process supervision (DeepSeekMath §4.1.3).2, for episodes of steps.

    Every valid step's reward is normalised over all valid steps of all episodes of its group
    (:func:`group_advantages` over steps, so the same ``scale``, ``eps``, ``ddof`` and degenerate
    cases), and a step's advantage is the sum of the normalised rewards of that step and the later
    steps of its episode. Unlike outcome supervision, a step is credited only with what followed it:
    with dense rewards (e.g. progress shaping) an action taken after the progress was made gets none
    of it, which lowers the variance of long episodes' gradients.

    Args:
        step_rewards: the reward of each step of each episode (column). Shape: [T, N].
        valid: which steps belong to the episodes (False after an episode ended). Shape: [T, N].
        group_ids: the group of each episode. Shape: [N].
        scale: which std divides the centred step rewards (as :func:`group_advantages`, over steps).
        eps: added to the std.
        ddof: delta degrees of freedom of the std.

    Returns:
        advantages, 0 on invalid steps. Shape: [T, N].
    """
    if step_rewards.dim() != 2 or valid.shape != step_rewards.shape:
        raise ValueError(
            f"step_rewards and valid must both be [T, N], got {step_rewards.shape} and {valid.shape}"
        )
    if group_ids.shape != step_rewards.shape[1:]:
        raise ValueError(f"group_ids must be [N] = {step_rewards.shape[1:]}, got {group_ids.shape}")
    rewards = _float(step_rewards)
    nan = torch.full_like(rewards, torch.nan)
    masked = torch.where(valid, rewards, nan).reshape(-1)  # NaN: left out of the group's statistics
    step_groups = group_ids.expand(rewards.shape).reshape(-1)
    normalised = group_advantages(masked, step_groups, scale, eps, ddof).reshape(rewards.shape)
    return normalised.flip(0).cumsum(0).flip(0) * valid.to(rewards.dtype)


@torch.no_grad()
def reward_decoupled_advantages(
    components: Tensor,
    group_ids: Tensor,
    weights: Sequence[float] | Tensor | None = None,
    eps: float = ADVANTAGE_EPS,
    ddof: int = 1,
) -> Tensor:
    """GDPO advantages (Liu et al., 2026): normalise each reward, then sum, then whiten.

    ``A_k,i = group_advantages(r_k)_i``, ``S_i = sum_k w_k A_k,i``,
    ``A_i = (S_i - mean(S)) / (std(S) + eps)`` over all ``M`` responses of the batch (response level, the TRL
    variant; verl whitens over tokens). Summing *after* normalising keeps reward combinations apart that GRPO
    on summed rewards collapses (§4.1). The batch step couples groups: pass the whole batch.

    NaN components count as missing for that reward only (advantage 0 from :func:`group_advantages`); a
    response whose every component is NaN is left out of the batch statistics and gets 0.

    Args:
        components: K reward components per response. Shape: [M, K].
        group_ids: group of each response. Shape: [M].
        weights: ``w_k`` (default all 1). Shape: [K].
        eps: added to every std.
        ddof: delta degrees of freedom of every std.

    Returns:
        advantages. Shape: [M].
    """
    if components.dim() != 2 or components.shape[0] != group_ids.shape[0]:
        raise ValueError(f"components must be [M, K] with M = len(group_ids), got {components.shape}")
    components = _float(components)
    num_rewards = components.shape[1]
    w = torch.ones(num_rewards) if weights is None else torch.as_tensor(weights)
    w = w.to(dtype=components.dtype, device=components.device)
    if w.shape != (num_rewards,):
        raise ValueError(f"weights must have one entry per reward component ({num_rewards}), got {w.shape}")
    per_reward = torch.stack(
        [group_advantages(components[:, k], group_ids, "group", eps, ddof) for k in range(num_rewards)], 1
    )
    summed = per_reward @ w
    scored = ~torch.isnan(components).all(1)
    if num_rewards == 0 or not bool(scored.any()):
        return torch.zeros_like(summed)
    n = scored.sum().to(summed.dtype)
    mean = summed[scored].sum() / n
    sq = torch.where(scored, (summed - mean).square(), torch.zeros_like(summed)).sum()
    advantages = (summed - mean) / (_std(sq, n, ddof) + eps)
    return torch.where(scored, advantages, torch.zeros_like(advantages))


@torch.no_grad()
def vtrace(
    log_rhos: Tensor,
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    dones: Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    rho_pg_bar: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018, §4.1).

    Time-major and boundary-aware like :func:`omnigym.platform.returns.gae`: ``gamma_t = gamma *
    (1 - terminated_t)`` stops bootstrapping at a true end, and the correction ``v_{t+1} - V(x_{t+1})`` is
    cut where ``dones[t]``, so a truncated step bootstraps from ``next_values[t]`` (the value of its true
    final observation) without leaking into the next episode. With all ``rho = 1`` and ``c_bar, rho_bar >= 1``
    the targets equal ``gae(..., gae_lambda=1)``'s returns.

    Args:
        log_rhos: ``log pi(a_t|x_t) - log mu(a_t|x_t)`` (target minus behaviour). Shape: [T, N].
        rewards: r_t. Shape: [T, N].
        values: V(x_t). Shape: [T, N].
        next_values: V(x_{t+1}) of the state that followed step t in the same episode (at a truncated step
            the value of the true final observation; at the last step the bootstrap). Shape: [T, N].
        terminated: the MDP ended after step t. Shape: [T, N].
        dones: terminated or truncated after step t. Shape: [T, N].
        gamma: discount.
        rho_bar: truncation of the importance weight in the TD error (rho-bar).
        c_bar: truncation of the trace-cutting coefficients (c-bar).
        rho_pg_bar: truncation of the importance weight in the policy-gradient advantage.

    Returns:
        ``vs`` (value targets) and ``pg_advantages = min(rho_pg_bar, rho_t) * (r_t + gamma_t * v_{t+1} -
        V(x_t))`` where ``v_{t+1} = next_values[t] + (v-correction at t+1)`` inside an episode (``vs[t+1]``
        when ``next_values[t] == values[t+1]``) and ``next_values[t]`` at an episode end or the segment end.
        Shape: [T, N] each.
    """
    rhos = log_rhos.exp()
    discounts = gamma * (1.0 - terminated.to(values.dtype))
    not_done = 1.0 - dones.to(values.dtype)
    # delta_t = min(rho_bar, rho_t) * (r_t + gamma_t * V(x_{t+1}) - V(x_t))
    deltas = rhos.clamp(max=rho_bar) * (rewards + discounts * next_values - values)
    decay = discounts * rhos.clamp(max=c_bar) * not_done
    corrections = torch.empty_like(values)  # v_t - V(x_t)
    next_corrections = torch.zeros_like(values)  # v_{t+1} - V(x_{t+1}) inside the episode, else 0
    running = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        next_corrections[t] = not_done[t] * running
        # v_t - V(x_t) = delta_t + gamma_t * c_t * (v_{t+1} - V(x_{t+1}))
        running = deltas[t] + decay[t] * running
        corrections[t] = running
    vs = values + corrections
    next_vs = next_values + next_corrections
    # A_t = min(rho_pg_bar, rho_t) * (r_t + gamma_t * v_{t+1} - V(x_t))
    pg_advantages = rhos.clamp(max=rho_pg_bar) * (rewards + discounts * next_vs - values)
    return vs, pg_advantages
