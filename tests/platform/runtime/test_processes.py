"""``map_in_processes``: results in order, the workers' thread count, errors."""

import operator

import pytest
import torch

from omnigym.platform.runtime.processes import map_in_processes


def test_inline_and_worker_runs_return_the_results_in_order():
    work = [(1, 2), (3, 4), (5, 6)]
    assert map_in_processes(operator.add, work, jobs=1) == [3, 7, 11]
    assert map_in_processes(operator.add, work, jobs=2) == [3, 7, 11]


def test_workers_run_with_the_requested_thread_count():
    # torch.get_num_threads takes no argument: one empty argument tuple per job
    assert map_in_processes(torch.get_num_threads, [(), ()], jobs=2, threads=1) == [1, 1]


def test_a_failing_call_raises_here_and_bad_counts_are_refused():
    with pytest.raises(ZeroDivisionError):
        map_in_processes(operator.truediv, [(1, 0), (2, 1)], jobs=2)
    with pytest.raises(ValueError, match="jobs"):
        map_in_processes(operator.add, [(1, 2)], jobs=0)
