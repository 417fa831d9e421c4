"""How far to trust a world model: k-step prediction error, policy ranking, and the report of both.

Three measurements, each answering one question a user of a learned simulator has:

* :func:`k_step_errors`: how fast does the model drift from reality? From a real observation at
  ``t`` the model is fed the real actions ``a_t .. a_{t+k-1}`` open loop (never corrected by a real
  observation) and its ``k``-th predicted observation and reward are compared with the real ones.
* :func:`spearman`: does the model order policies as the real env does? The rank correlation of
  the policies' returns in the model and in the real env (model-based policy evaluation), with
  its exact p-value (:func:`spearman_p_value`) and, for fewer than
  :data:`MIN_INFORMATIVE_POLICIES` policies, a caveat (:func:`rank_correlation_caveat`): two
  policies can only agree (+1) or disagree (-1), three give one of four values.
* :class:`FidelityReport`: both, plus the fit's held-out metrics and, from the bench, the real
  return of a policy trained only in the model against one trained in the real env; written as
  ``fidelity.json`` and ``fidelity.md`` every time a model is fitted or evaluated.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.world_models.base import WorldModel
from omnigym.world_models.known import KnownFn

DEFAULT_KS = (1, 5, 10, 20)
"""Prediction horizons the report shows."""
REPORT_JSON = "fidelity.json"
REPORT_MARKDOWN = "fidelity.md"
MIN_INFORMATIVE_POLICIES = 4
"""Fewer policies than this make a rank correlation coarse by construction (n=2: only +1 or -1)."""
EXACT_P_MAX_POLICIES = 8
"""Up to this many policies the p-value enumerates all n! orderings; above, scipy's t approximation."""

Episode = Mapping[str, Any]
"""One real episode in Minari's layout (as ``ReplayBuffer.episodes`` yields): ``observations``
(key -> ``[T+1, ...]``), ``actions`` ``[T, ...]``, ``rewards`` ``[T]``."""


@dataclass
class KStepError:
    """Open-loop error ``k`` model steps after a real observation, averaged over windows.

    ``obs_mse`` is in raw observation units (mean over rows and dimensions). ``obs_nmse`` divides
    each dimension's MSE by that dimension's variance over the held-out real observations before
    averaging, so dimensions of different scales weigh alike and 1.0 means "no better than
    predicting the data mean".
    """

    k: int
    obs_mse: float
    obs_nmse: float
    reward_mse: float
    windows: int
    """How many (episode, start) windows of length ``k`` were measured."""


@dataclass
class _Windows:
    """Stacked open-loop windows of real data. ``N`` windows, horizon ``K``, flat obs dim ``D``."""

    obs: dict[str, Tensor]
    """key -> ``[N, K + 1, ...]``: the real observations at ``t .. t + K``."""
    actions: Tensor
    """``[N, K, A]``: the real actions at ``t .. t + K - 1`` (padded past the episode's end)."""
    rewards: Tensor
    """``[N, K]``: the real rewards."""
    valid: Tensor
    """``[N, K]`` bool: step ``j + 1`` of the window lies inside its episode."""


def _model_keys(model: WorldModel) -> list[str]:
    """The observation keys the model predicts: its observation space's ``Box`` keys."""
    space = model.observation_space
    if not isinstance(space, spaces.Dict):
        raise TypeError(f"world models take Dict observation spaces, got {type(space).__name__}")
    return [key for key, sub in space.spaces.items() if isinstance(sub, spaces.Box)]


def _windows(episodes: Sequence[Episode], keys: list[str], horizon: int) -> _Windows:
    """Every start ``t`` of every episode as a window of ``horizon`` steps (indices clipped at the end)."""
    obs: dict[str, list[np.ndarray]] = {key: [] for key in keys}
    actions, rewards, valid = [], [], []
    offsets = np.arange(horizon + 1)
    for episode in episodes:
        length = len(episode["rewards"])
        if length == 0:
            continue
        starts = np.arange(length)[:, None]
        obs_idx = np.minimum(starts + offsets, length)  # [T, K + 1]
        step_idx = np.minimum(starts + offsets[:-1], length - 1)  # [T, K]
        for key in keys:
            obs[key].append(np.asarray(episode["observations"][key], dtype=np.float32)[obs_idx])
        episode_actions = np.asarray(episode["actions"], dtype=np.float32).reshape(length, -1)
        actions.append(episode_actions[step_idx])
        rewards.append(np.asarray(episode["rewards"], dtype=np.float32)[step_idx])
        valid.append(starts + offsets[1:] <= length)
    if not actions:
        raise ValueError("k-step errors need at least one non-empty real episode")
    return _Windows(
        obs={key: torch.from_numpy(np.concatenate(v)) for key, v in obs.items()},
        actions=torch.from_numpy(np.concatenate(actions)),
        rewards=torch.from_numpy(np.concatenate(rewards)),
        valid=torch.from_numpy(np.concatenate(valid)),
    )


def _flat(obs: Mapping[str, Tensor], keys: list[str]) -> Tensor:
    """The keys' values as one row per sample. Shape: [B, D]."""
    return torch.cat([obs[key].reshape(obs[key].shape[0], -1).float() for key in keys], dim=-1)


def _observation_variance(episodes: Sequence[Episode], keys: list[str]) -> Tensor:
    """Each flat dimension's variance over every real observation of ``episodes`` (floored). Shape: [D]."""
    rows = {
        key: torch.from_numpy(
            np.concatenate([np.asarray(e["observations"][key], dtype=np.float32) for e in episodes])
        )
        for key in keys
    }
    return _flat(rows, keys).var(dim=0, correction=0).clamp_min(1e-8)


def _step_kwargs(model: WorldModel) -> dict[str, Any]:
    """The mean prediction and no uncertainty, for models whose ``step`` takes those arguments.

    ``deterministic=True``: no sampled noise. ``with_uncertainty=False``: the ensemble then runs
    only each row's member instead of all of them.
    """
    parameters = inspect.signature(model.step).parameters
    wanted = {"deterministic": True, "with_uncertainty": False}
    return {name: value for name, value in wanted.items() if name in parameters}


@torch.no_grad()
def k_step_errors(
    model: WorldModel,
    episodes: Sequence[Episode],
    ks: Sequence[int] = DEFAULT_KS,
    *,
    max_windows: int | None = 4096,
    seed: int = 0,
    reward_fn: KnownFn | None = None,
) -> list[KStepError]:
    """Open-loop ``k``-step prediction error of ``model`` on real ``episodes``, for every ``k`` in ``ks``.

    Each window starts at a real observation ``o_t``; the model is reset there and stepped with the
    real actions ``a_t .. a_{t+k-1}``, in one batch over all windows. Its ``k``-th observation is
    compared with ``o_{t+k}`` and its ``k``-th reward with ``r_{t+k-1}``. A window counts for ``k``
    only if ``t + k`` lies inside its episode (the model never sees a reset). Models whose ``step``
    takes ``deterministic`` (the ensemble) are stepped with it: their mean prediction, without the
    sampled noise; the ensemble still draws one elite member per row and step, from a generator
    seeded with ``seed``.

    Args:
        model: the world model (any :class:`WorldModel`).
        episodes: held-out real episodes, Minari layout (:data:`Episode`).
        ks: horizons to report, each >= 1.
        max_windows: measure a random subset of this many start windows (None: all of them).
        seed: seeds the subset and the model's draws.
        reward_fn: compute the predicted reward from the predicted observations with this known
            function (``known.py``, flat ``"state"`` observations) instead of the model's reward.

    Returns:
        One :class:`KStepError` per ``k``, in the order of ``ks``.

    Raises:
        ValueError: ``ks`` empty or below 1, or no non-empty episode.
    """
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be horizons >= 1, got {list(ks)}")
    keys = _model_keys(model)
    horizon = max(ks)
    data = _windows(episodes, keys, horizon)
    generator = torch.Generator().manual_seed(seed)
    if max_windows is not None and len(data.actions) > max_windows:
        pick = torch.randperm(len(data.actions), generator=generator)[:max_windows]
        data = _Windows(
            {k: v[pick] for k, v in data.obs.items()},
            data.actions[pick],
            data.rewards[pick],
            data.valid[pick],
        )
    device = model.device
    variance = _observation_variance(episodes, keys)
    state = model.reset({k: v[:, 0].to(device) for k, v in data.obs.items()})
    predicted = {k: v[:, 0].to(device) for k, v in data.obs.items()}
    extra = _step_kwargs(model)
    model_generator = torch.Generator(device=device).manual_seed(seed)
    results = {}
    for j in range(1, horizon + 1):
        action = data.actions[:, j - 1].to(device)
        state, next_obs, reward, _, _ = model.step(state, action, generator=model_generator, **extra)
        if reward_fn is not None:
            reward = reward_fn(_flat(predicted, keys), action, _flat(next_obs, keys))
        predicted = next_obs
        if j not in ks:
            continue
        valid = data.valid[:, j - 1]
        real = _flat({k: v[:, j] for k, v in data.obs.items()}, keys)[valid]
        error = (_flat(next_obs, keys).cpu()[valid] - real).square()  # [n, D]
        reward_error = (reward.float().cpu()[valid] - data.rewards[:, j - 1][valid]).square()
        n = int(valid.sum())
        results[j] = KStepError(
            k=j,
            obs_mse=float(error.mean()) if n else math.nan,
            obs_nmse=float((error.mean(dim=0) / variance).mean()) if n else math.nan,
            reward_mse=float(reward_error.mean()) if n else math.nan,
            windows=n,
        )
    return [results[k] for k in ks]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long lists (ties get their average rank).

    The Pearson correlation of the two rank vectors (``scipy.stats.spearmanr``). NaN when either
    list is constant (no ranking to compare).

    Raises:
        ValueError: lists of different lengths or with fewer than two entries.
    """
    if len(x) != len(y):
        raise ValueError(f"rank correlation needs lists of equal length, got {len(x)} and {len(y)}")
    if len(x) < 2:
        raise ValueError(f"rank correlation needs at least two entries, got {len(x)}")
    if len(set(x)) == 1 or len(set(y)) == 1:
        return math.nan
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def spearman_p_value(x: Sequence[float], y: Sequence[float]) -> float:
    """Two-sided p-value of :func:`spearman` under "no association between the two orderings".

    Exact for up to :data:`EXACT_P_MAX_POLICIES` entries: the share of all ``n!`` orderings of
    ``y`` whose correlation with ``x`` is at least as large in absolute value (n=2: always 1.0;
    n=3 with a perfect ranking: 1/3). Above that, scipy's t approximation. NaN when the
    correlation is (a list is constant).

    Raises:
        ValueError: as :func:`spearman`.
    """
    rho = spearman(x, y)
    if math.isnan(rho):
        return math.nan
    if len(x) > EXACT_P_MAX_POLICIES:
        from scipy.stats import spearmanr

        return float(spearmanr(x, y).pvalue)
    rhos = _permuted_rhos(x, y)
    return float(np.mean(np.abs(rhos) >= abs(rho) - 1e-9))


def _permuted_rhos(x: Sequence[float], y: Sequence[float]) -> np.ndarray:
    """Spearman's rho of ``x`` against every ordering of ``y``. Shape: [n!]."""
    from scipy.stats import rankdata

    rank_x = rankdata(x) - (len(x) + 1) / 2
    rank_y = rankdata(y) - (len(y) + 1) / 2
    orderings = np.array(list(itertools.permutations(range(len(y)))))  # [n!, n]
    permuted = rank_y[orderings]
    return (permuted @ rank_x) / math.sqrt(float(rank_x @ rank_x) * float(rank_y @ rank_y))


def rank_correlation_caveat(n: int, p_value: float) -> str | None:
    """Why a rank correlation of ``n`` policies says little, or None from :data:`MIN_INFORMATIVE_POLICIES` on.

    Args:
        n: how many policies were ranked.
        p_value: the correlation's :func:`spearman_p_value`, quoted in the caveat.
    """
    if n >= MIN_INFORMATIVE_POLICIES:
        return None
    possible = sorted({round(float(r), 3) for r in _permuted_rhos(range(n), range(n))}, reverse=True)
    shown = ", ".join(f"{value:+g}" for value in possible)
    return (
        f"not informative: with only {n} policies the rank correlation can only be {shown} "
        f"(exact two-sided p = {p_value:.2f}); rank at least {MIN_INFORMATIVE_POLICIES} policies "
        "for a meaningful value"
    )


@dataclass
class PolicyReturn:
    """One policy's mean return over the same episodes in the model and in the real env."""

    name: str
    model_return: float
    real_return: float


@dataclass
class DreamVsReal:
    """Real-env return of a policy trained only in the model vs one trained in the real env.

    Both had ``updates`` gradient updates. Pendulum's returns are negative, so the score is taken
    relative to a random policy: ``(dream - random) / (real - random)`` (1.0: as good as the
    real-trained policy; 0.0: no better than random).
    """

    dream_return: float
    real_return: float
    random_return: float
    updates: int

    @property
    def score(self) -> float:
        """``(dream - random) / (real - random)``."""
        gap = self.real_return - self.random_return
        return (self.dream_return - self.random_return) / gap if gap else math.nan


@dataclass
class FidelityReport:
    """What is known about one world model's fidelity; ``fidelity.json`` + ``fidelity.md``.

    Sections are filled by whoever measured them (``world-model fit`` the fit and k-step errors,
    ``world-model eval`` the policy ranking, the model-based trainer the trained policy's returns,
    the bench the dream-vs-real comparison) and kept when another command updates the report.
    """

    env_id: str
    model: str
    """The model's folder (or a description of it)."""
    k_step: list[KStepError] = field(default_factory=list)
    holdout_episodes: int = 0
    """Real episodes the k-step errors were measured on (none of them trained the model)."""
    fit: dict[str, float] = field(default_factory=dict)
    """The fit's held-out metrics (``eval/obs_mse``, ``train/epochs``, ...)."""
    policies: list[PolicyReturn] = field(default_factory=list)
    rank_correlation: float | None = None
    """Spearman correlation of ``policies``' model and real returns (its p-value and caveat are
    derived from ``policies``: :attr:`rank_p_value`, :attr:`rank_caveat`)."""
    dream_vs_real: DreamVsReal | None = None
    updated: str = ""
    """When the report was last written (local time)."""

    @property
    def rank_p_value(self) -> float | None:
        """Exact two-sided p-value of ``rank_correlation`` (:func:`spearman_p_value`), when it is set."""
        if self.rank_correlation is None or len(self.policies) < 2:
            return None
        return spearman_p_value(
            [p.model_return for p in self.policies], [p.real_return for p in self.policies]
        )

    @property
    def rank_caveat(self) -> str | None:
        """Why ``rank_correlation`` says little (fewer than 4 policies), or None."""
        p_value = self.rank_p_value
        return None if p_value is None else rank_correlation_caveat(len(self.policies), p_value)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (with the dream-vs-real score and the rank correlation's p-value and caveat)."""
        data = asdict(self)
        if self.dream_vs_real is not None:
            data["dream_vs_real"]["score"] = self.dream_vs_real.score
        if self.rank_correlation is not None:
            data["rank_p_value"], data["rank_caveat"] = self.rank_p_value, self.rank_caveat
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FidelityReport:
        """Inverse of :meth:`to_dict` (the derived score, p-value and caveat are recomputed)."""
        dream = data.get("dream_vs_real")
        return cls(
            env_id=data["env_id"],
            model=data["model"],
            k_step=[KStepError(**row) for row in data.get("k_step", [])],
            holdout_episodes=int(data.get("holdout_episodes", 0)),
            fit=dict(data.get("fit", {})),
            policies=[PolicyReturn(**row) for row in data.get("policies", [])],
            rank_correlation=data.get("rank_correlation"),
            dream_vs_real=None
            if dream is None
            else DreamVsReal(**{k: v for k, v in dream.items() if k != "score"}),
            updated=data.get("updated", ""),
        )

    def write(self, folder: str | Path) -> tuple[Path, Path]:
        """Write ``fidelity.json`` and ``fidelity.md`` into ``folder``; returns both paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.updated = time.strftime("%Y-%m-%d %H:%M:%S")
        json_path, md_path = folder / REPORT_JSON, folder / REPORT_MARKDOWN
        json_path.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=True))
        md_path.write_text(self.to_markdown())
        return json_path, md_path

    @classmethod
    def load(cls, folder: str | Path) -> FidelityReport | None:
        """The report in ``folder``, or None when it has none."""
        path = Path(folder) / REPORT_JSON
        return cls.from_dict(json.loads(path.read_text())) if path.is_file() else None

    def to_markdown(self) -> str:
        """The report as a Markdown page."""
        lines = [
            f"# World-model fidelity: {self.env_id}",
            "",
            f"Model: `{self.model}`. Updated {self.updated}.",
            "",
        ]
        if self.fit:
            lines += ["## Fit (held-out transitions)", "", "| metric | value |", "| --- | --- |"]
            lines += [f"| {k} | {v:.4g} |" for k, v in self.fit.items()]
            lines.append("")
        if self.k_step:
            lines += [
                f"## Open-loop k-step error ({self.holdout_episodes} held-out real episodes)",
                "",
                "Real start observation, real actions, model predictions fed back; obs MSE in raw units, "
                "NMSE per dimension over the data variance (1 = predicting the mean).",
                "",
                "| k | obs MSE | obs NMSE | reward MSE | windows |",
                "| --- | --- | --- | --- | --- |",
            ]
            lines += [
                f"| {r.k} | {r.obs_mse:.4g} | {r.obs_nmse:.4g} | {r.reward_mse:.4g} | {r.windows} |"
                for r in self.k_step
            ]
            lines.append("")
        if self.policies:
            lines += [
                "## Policy returns: model vs real env",
                "",
                "| policy | model | real |",
                "| --- | --- | --- |",
            ]
            lines += [f"| {p.name} | {p.model_return:.1f} | {p.real_return:.1f} |" for p in self.policies]
            if self.rank_correlation is not None:
                line = f"Spearman rank correlation (model vs real): {self.rank_correlation:.3f}"
                p_value, caveat = self.rank_p_value, self.rank_caveat
                if p_value is not None:
                    line += f" over {len(self.policies)} policies (two-sided p = {p_value:.3g})"
                lines += ["", line]
                if caveat is not None:
                    lines += ["", f"**Caveat:** {caveat}."]
            lines.append("")
        if self.dream_vs_real is not None:
            d = self.dream_vs_real
            lines += [
                f"## Trained in the model vs in the real env ({d.updates} updates each)",
                "",
                f"Real-env return: model-trained {d.dream_return:.1f}, real-trained {d.real_return:.1f}, "
                f"random {d.random_return:.1f}; score (dream - random) / (real - random) = {d.score:.3f}",
                "",
            ]
        return "\n".join(lines)
