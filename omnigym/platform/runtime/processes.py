"""Independent jobs (a seed, a policy to train) spread over worker processes.

Benchmarks and sweeps on a small CPU finish sooner with one single-threaded process per core than
with one process using every core: small networks barely gain from intra-op threads. Workers are
started with ``spawn`` (safe with torch and env worker threads) and inherit ``os.environ`` as it is
when the pool starts, e.g. ``$MINARI_DATASETS_PATH``.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

import torch

Result = TypeVar("Result")


def map_in_processes(
    fn: Callable[..., Result], work: Sequence[Sequence[Any]], jobs: int, threads: int = 1
) -> list[Result]:
    """``[fn(*args) for args in work]``, in ``jobs`` worker processes of ``threads`` torch threads.

    With ``jobs == 1`` the calls run here, in order, with this process's thread count. ``fn`` and
    its arguments must be picklable (``fn`` defined at a module's top level). Results keep the
    order of ``work``; the first exception raised by a call is raised here.

    Raises:
        ValueError: if ``jobs`` or ``threads`` is below 1.
    """
    if jobs < 1 or threads < 1:
        raise ValueError(f"jobs and threads must be >= 1, got jobs={jobs}, threads={threads}")
    if jobs == 1:
        return [fn(*args) for args in work]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        jobs, mp_context=context, initializer=torch.set_num_threads, initargs=(threads,)
    ) as pool:
        futures = [pool.submit(fn, *args) for args in work]
        return [future.result() for future in futures]
