"""Simulated step latency for envs that wait: a browser page, a desktop app, a game behind a server.

Real agent workloads have step times with long tails (a page that usually answers in 20 ms and
sometimes in 200), and how a runtime copes with them decides its throughput: a synchronous batch
waits for its slowest member. The GUI and game envs take a ``latency`` option, read by
:meth:`LatencyModel.parse`:

* a number: a fixed delay in seconds;
* ``(low, high)``: a uniform draw in seconds per step;
* ``{dist: fixed, ms}``, ``{dist: uniform, low_ms, high_ms}`` or
  ``{dist: lognormal, median_ms, sigma[, max_ms]}``: the same in milliseconds, or a log-normal
  delay with median ``median_ms`` and log-space deviation ``sigma`` (mean
  ``median * exp(sigma^2 / 2)``; ``max_ms`` clips the rare extreme draws).

The delays come from a generator of their own (:class:`StepDelay`), so observations, rewards and
the env's own random draws never depend on the latency setting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

LatencySpec = float | tuple[float, float] | Mapping[str, Any]
"""What an env's ``latency`` option accepts (see the module docstring)."""
DISTRIBUTIONS = {
    "fixed": ("ms",),
    "uniform": ("low_ms", "high_ms"),
    "lognormal": ("median_ms", "sigma"),
}
"""Each ``dist`` and its required keys (``lognormal`` also takes ``max_ms``)."""
OPTIONAL_KEYS = {"lognormal": ("max_ms",)}


@dataclass(frozen=True)
class LatencyModel:
    """A distribution of per-step delays, in seconds.

    Attributes:
        dist: ``fixed``, ``uniform`` or ``lognormal``.
        low: the fixed delay, or the uniform range's lower bound.
        high: the uniform range's upper bound (``low`` for a fixed delay).
        median: the log-normal median (0 otherwise).
        sigma: the log-normal deviation of ``log(delay)`` (0 otherwise).
        cap: the log-normal clip (``inf`` when none).
    """

    dist: str = "fixed"
    low: float = 0.0
    high: float = 0.0
    median: float = 0.0
    sigma: float = 0.0
    cap: float = math.inf

    @classmethod
    def parse(cls, spec: LatencySpec) -> LatencyModel:
        """The model of an env's ``latency`` option.

        Raises:
            ValueError: an unknown ``dist``, a missing or unknown key, or a negative delay.
        """
        if isinstance(spec, Mapping):
            return cls._from_mapping(spec)
        if isinstance(spec, (tuple, list)):
            if len(spec) != 2:
                raise ValueError(f"latency (low, high) needs two numbers, got {spec!r}")
            low, high = float(spec[0]), float(spec[1])
            if not 0 <= low <= high:
                raise ValueError(f"latency must be >= 0 seconds or a (low, high) range, got {spec!r}")
            return cls("fixed" if low == high else "uniform", low, high)
        delay = float(spec)
        if delay < 0:
            raise ValueError(f"latency must be >= 0 seconds or a (low, high) range, got {spec!r}")
        return cls("fixed", delay, delay)

    @classmethod
    def _from_mapping(cls, spec: Mapping[str, Any]) -> LatencyModel:
        dist = spec.get("dist")
        if dist not in DISTRIBUTIONS:
            raise ValueError(f"latency: dist must be one of {', '.join(DISTRIBUTIONS)}, got {dist!r}")
        required, optional = DISTRIBUTIONS[dist], OPTIONAL_KEYS.get(dist, ())
        missing = [key for key in required if key not in spec]
        unknown = sorted(set(spec) - {"dist", *required, *optional})
        if missing or unknown:
            raise ValueError(
                f"latency with dist {dist} takes {', '.join(required + optional)}; "
                f"missing {missing or 'none'}, unknown {unknown or 'none'}"
            )
        values = {key: float(spec[key]) for key in (*required, *optional) if key in spec}
        if any(value < 0 for value in values.values()):
            raise ValueError(f"latency values must be >= 0, got {dict(spec)}")
        if dist == "fixed":
            return cls("fixed", values["ms"] / 1e3, values["ms"] / 1e3)
        if dist == "uniform":
            if values["low_ms"] > values["high_ms"]:
                raise ValueError(f"latency: low_ms must be <= high_ms, got {dict(spec)}")
            return cls("uniform", values["low_ms"] / 1e3, values["high_ms"] / 1e3)
        cap = values.get("max_ms", math.inf) / 1e3
        return cls("lognormal", median=values["median_ms"] / 1e3, sigma=values["sigma"], cap=cap)

    @property
    def is_zero(self) -> bool:
        """Every draw is 0 (no sleeping at all)."""
        return self.high == 0 and self.median == 0

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...] | None = None) -> Any:
        """Delays in seconds: a float, or an array of ``size``."""
        if self.dist == "lognormal":
            draws = np.minimum(self.median * np.exp(self.sigma * rng.standard_normal(size)), self.cap)
        elif self.dist == "uniform":
            draws = rng.uniform(self.low, self.high, size)
        else:
            draws = np.full(size if size is not None else (), self.low)
        return float(draws) if size is None else draws

    def mean(self) -> float:
        """The expected delay in seconds (the cap ignored)."""
        if self.dist == "lognormal":
            return self.median * math.exp(self.sigma**2 / 2)
        return (self.low + self.high) / 2

    def expected_max(self, n: int, draws: int = 20_000, seed: int = 0) -> float:
        """The expected slowest of ``n`` simultaneous delays (a Monte Carlo estimate, seconds).

        A batch of ``n`` envs stepped together waits this long per step; it is what decoupling
        workers (fewer envs per batch) saves on long tails.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        samples = self.sample(np.random.default_rng(seed), (draws, n))
        return float(np.max(samples, axis=1).mean())


class StepDelay:
    """Sleeps one draw of a :class:`LatencyModel` per call, from a generator of its own.

    Args:
        spec: the env's ``latency`` option.
    """

    STREAM = 0x1A7E
    """Mixed into reset seeds: the delays never share a stream with the env's own draws."""

    def __init__(self, spec: LatencySpec) -> None:
        self.model = LatencyModel.parse(spec)
        self._rng = np.random.default_rng(0)

    def reseed(self, seed: int | None) -> None:
        """Restart the delays from ``seed`` (None keeps the current stream)."""
        if seed is not None:
            self._rng = np.random.default_rng((int(seed), self.STREAM))

    def __call__(self) -> float:
        """Sleep one delay and return it in seconds (nothing drawn or slept for a zero model)."""
        if self.model.is_zero:
            return 0.0
        delay = self.model.sample(self._rng)
        if delay > 0:
            time.sleep(delay)
        return float(delay)
