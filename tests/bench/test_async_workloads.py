"""The async bench's VLM workload: replies end exactly at their drawn, long-tailed lengths."""

import numpy as np
import pytest
import torch

from omnigym.envs.latency import LatencyModel


@pytest.fixture(scope="module")
def workloads(bench_module):
    return bench_module("_async_workloads")


def generate(processor, rows: int, vocab: int, eos: int, steps: int) -> torch.Tensor:
    """A greedy generation loop over scores that always prefer EOS (so only the processor delays it)."""
    ids = torch.zeros((rows, 5), dtype=torch.long)
    for _ in range(steps):
        scores = torch.zeros((rows, vocab))
        scores[:, eos] = 10.0
        scores[:, 1] = 5.0
        ids = torch.cat([ids, processor(ids, scores).argmax(dim=1, keepdim=True)], dim=1)
    return ids[:, 5:]


def test_replies_end_exactly_at_their_drawn_lengths(workloads) -> None:
    eos = 3
    lengths = workloads.ReplyLengths(eos, median=4, sigma=1.0, max_tokens=12, seed=7)
    tokens = generate(lengths, rows=6, vocab=8, eos=eos, steps=12)
    drawn = lengths._lengths.numpy()
    first_eos = (tokens == eos).int().argmax(dim=1).numpy() + 1  # reply length incl. EOS
    assert (first_eos == drawn).all(), (first_eos, drawn)
    assert drawn.min() >= 1 and drawn.max() <= 12
    again = generate(lengths, rows=6, vocab=8, eos=eos, steps=12)  # a new generation: new draws
    assert not torch.equal(again, tokens) or not np.array_equal(lengths._lengths.numpy(), drawn)


def test_lengths_are_long_tailed_and_a_smaller_batch_waits_less(workloads) -> None:
    lengths = workloads.ReplyLengths(0, median=8, sigma=1.0, max_tokens=96)
    draws = lengths.draw(50_000)
    assert np.median(draws) == 8 and draws.max() == 96 and (draws > 40).mean() > 0.03
    assert lengths.expected_max(8) > 1.7 * lengths.expected_max(2)


def test_overlap_bound_counts_overlap_and_the_shorter_wait(workloads) -> None:
    local = {"collect_s": 10.0, "update_s": 5.0, "samples": 8 * 100}
    fixed = {"num_envs": 8, "num_workers": 2, "latency": 0.02}
    assert workloads.overlap_bound(fixed, local) == pytest.approx(1.5)  # (10 + 5) / max(10, 5)
    tail = {**fixed, "num_workers": 4, "latency": {"dist": "lognormal", "median_ms": 20, "sigma": 1.0}}
    # 100 steps, each waiting E[max of 8] - E[max of 2] (about 0.102 - 0.050 s) less in a worker
    model = LatencyModel.parse(tail["latency"])
    saved = 100 * (model.expected_max(8) - model.expected_max(2))
    assert 4.5 < saved < 5.8
    assert workloads.overlap_bound(tail, local) == pytest.approx(15.0 / max(10.0 - saved, 5.0))
