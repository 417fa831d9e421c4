"""Scoring the 4 s windows of an episode like NAVSIM plans, in one compiled pass over the slots.

When a window ends (every 40 steps, or when the episode does), its per-step checks have already
run; what is left is to reduce them over the window, add the trajectory-level sub-metrics
(comfort of the window, history comfort with the 2 s before it, progress against the IDM
reference) and aggregate PDMS and EPDMS (with the logged human's false-positive filter). The
rules themselves live in :mod:`~omnigym.envs.driving.comfort` and
:mod:`~omnigym.envs.driving.metrics`; this module runs them for the slots whose windows ended.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from omnigym.envs.driving.comfort import violations_row
from omnigym.envs.driving.metrics import PROGRESS_THRESHOLD, SUB_METRICS, aggregate_row

NC, DAC, DDC, TLC, EP, TTC, C, LK, HC, EC = (SUB_METRICS.index(name) for name in SUB_METRICS)


@njit(cache=True)
def score_windows(
    slots: np.ndarray,
    time: np.ndarray,
    ego_track: np.ndarray,
    window_min: np.ndarray,
    minima_columns: np.ndarray,
    ec_sum: np.ndarray,
    ec_count: np.ndarray,
    station: np.ndarray,
    window_start_station: np.ndarray,
    reference_window: np.ndarray,
    human: np.ndarray,
    human_count: np.ndarray,
    window_filters: np.ndarray,
    history_filters: np.ndarray,
    pdms_columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    epdms_columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    dt: float,
    pdms_progress_v1: bool,
    pdms_sum: np.ndarray,
    epdms_sum: np.ndarray,
    window_sum: np.ndarray,
    windows_done: np.ndarray,
) -> None:
    """Score the window that just ended in each of ``slots`` and add it to the episode's sums.

    Args:
        slots: the slots whose window ended at their current ``time``.
        time: ``[N]`` log index of the last step driven.
        ego_track: ``[N, T, 3]`` the ego's poses by log index, the log's history before the episode.
        window_min: ``[N, len(minima_columns)]`` running minima of the per-step checks.
        minima_columns: the SUB_METRICS column of each ``window_min`` column.
        ec_sum: ``[N]`` sum of the window's two-frame extended comfort values.
        ec_count: ``[N]`` how many (0: EC is 1).
        station: ``[N]`` metres along the route now.
        window_start_station: ``[N]`` at the window's start.
        reference_window: ``[N]`` the IDM reference's progress over the window (m).
        human: ``[N, W, len(SUB_METRICS)]`` the logged human's window scores.
        human_count: ``[N]`` windows of ``human`` per slot (later windows reuse the last).
        window_filters: :func:`~omnigym.envs.driving.comfort.savgol_filters` for a window's poses.
        history_filters: the same for the history and the window together.
        pdms_columns: :data:`~omnigym.envs.driving.metrics.PDMS_COLUMNS`.
        epdms_columns: :data:`~omnigym.envs.driving.metrics.EPDMS_COLUMNS`.
        dt: seconds per step.
        pdms_progress_v1: PDMS takes EP by NAVSIM v1.1's rule (:func:`_ego_progress_v1`) rather
            than v2's, which EPDMS always uses.
        pdms_sum: ``[N]`` updated.
        epdms_sum: ``[N]`` updated.
        window_sum: ``[N, len(SUB_METRICS)]`` updated.
        windows_done: ``[N]`` updated.
    """
    window = window_filters.shape[1] - 1
    history = history_filters.shape[1] - window - 1
    track = np.empty((history + window + 1, 3))  # the history, then the window's poses
    violations = np.empty(history + window + 1, np.bool_)
    scores = np.empty(len(SUB_METRICS))
    filtered = np.empty(len(SUB_METRICS))
    pdms_scores = np.empty(len(SUB_METRICS))
    for n in slots:
        end = time[n]
        start = history + ((end - history - 1) // window) * window
        comfortable, history_comfortable = _comfort(
            ego_track[n], start, end, track, violations, window_filters, history_filters, dt
        )
        for i in range(len(minima_columns)):
            scores[minima_columns[i]] = window_min[n, i]
        scores[C] = 1.0 if comfortable else 0.0
        scores[HC] = 1.0 if history_comfortable else 0.0
        scores[EC] = ec_sum[n] / ec_count[n] if ec_count[n] > 0 else 1.0
        progress = max(station[n] - window_start_station[n], 0.0)
        scores[EP] = _ego_progress(scores, progress, reference_window[n])
        # EPDMS: a sub-metric the human fails counts as passed (NAVSIM v2's false-positive filter)
        human_row = human[n, min((start - history) // window, human_count[n] - 1)]
        for i in range(len(scores)):
            filtered[i] = 1.0 if human_row[i] == 0 else scores[i]
        pdms_scores[:] = scores
        if pdms_progress_v1:
            pdms_scores[EP] = _ego_progress_v1(scores, progress, reference_window[n])
        pdms_sum[n] += aggregate_row(pdms_scores, pdms_columns[0], pdms_columns[1], pdms_columns[2])
        epdms_sum[n] += aggregate_row(filtered, epdms_columns[0], epdms_columns[1], epdms_columns[2])
        window_sum[n] += scores
        windows_done[n] += 1


@njit(cache=True)
def _comfort(
    ego_track: np.ndarray,
    start: int,
    end: int,
    track: np.ndarray,
    violations: np.ndarray,
    window_filters: np.ndarray,
    history_filters: np.ndarray,
    dt: float,
) -> tuple[bool, bool]:
    """Whether the window from log index ``start`` to ``end`` is comfortable, alone and after its history.

    ``ego_track [T, 3]`` is one slot's poses by log index; ``track`` and ``violations`` are scratch
    arrays as long as the history and the window's poses together.
    """
    window = window_filters.shape[1] - 1
    history = len(track) - window - 1
    for j in range(history):
        track[j] = ego_track[start - history + j]
    for j in range(window + 1):  # a short window (the episode ended) repeats its end
        track[history + j] = ego_track[min(start + j, end)]
    violations_row(track[history:], dt, window_filters, violations[: window + 1])
    comfortable = not violations[: window + 1].any()
    violations_row(track, dt, history_filters, violations)
    history_comfortable = not violations.any()
    return comfortable, history_comfortable


@njit(cache=True)
def _ego_progress_v1(scores: np.ndarray, progress: float, reference: float) -> float:
    """EP by NAVSIM v1.1's rule.

    Masked progress (times NC and DAC) over the best of it and the reference's; 0 where NC * DAC
    is 0; 1 when neither made enough progress to tell.
    """
    product = scores[NC] * scores[DAC]
    masked = progress * product
    best = max(masked, reference)
    if product == 0.0:
        return 0.0
    return masked / best if best > PROGRESS_THRESHOLD else 1.0


@njit(cache=True)
def _ego_progress(scores: np.ndarray, progress: float, reference: float) -> float:
    """EP by NAVSIM v2's rule.

    Raw progress over the best of the masked progress (times NC, DAC, DDC and TLC) and the
    reference's, clipped to [0, 1]; 1 when neither made enough progress to tell.
    """
    best = max(progress * scores[NC] * scores[DAC] * scores[DDC] * scores[TLC], reference)
    return min(max(progress / max(best, 1e-12), 0.0), 1.0) if best > PROGRESS_THRESHOLD else 1.0
