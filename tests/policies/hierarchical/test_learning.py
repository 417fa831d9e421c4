"""The relabelled controller learns to use its sub-goal (slow: two BC runs of the bench's pipeline).

The bench's own functions (``bench/hierarchical_pickplace.py``): 20 stochastic expert episodes,
one controller conditioned on each step's relabelled sub-goal and one on the task instruction, 400
BC steps each with the same seed. On the demonstration windows, the sub-goal controller's first
executed action is far closer to the expert's when given the true sub-goals (relabelled at the
expert's switching points) than the instruction controller's is, and far further when the
sub-goals are shuffled: it reads them. (This machine: MSE 0.059 with true sub-goals, 0.52
shuffled, 0.149 for the instruction-only controller.) About a minute on a 2-core CPU. Whether
this turns into more closed-loop successes is the bench's question (docs/policies.md, "Planner
over controller").
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omnigym.core.policy import Policy
from omnigym.platform.cli import BENCH_DIR
from omnigym.policies.chunking.data import DemoWindows
from omnigym.policies.hierarchical.planners import PICKPLACE_INSTRUCTION
from omnigym.policies.hierarchical.policy import SUBGOAL_KEY
from omnigym.policies.hierarchical.subgoals import PICKPLACE_SUBGOALS, embed_text, relabel_episodes


def bench_module() -> Any:
    path = BENCH_DIR / "hierarchical_pickplace.py"
    spec = importlib.util.spec_from_file_location("hierarchical_pickplace", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def action_error(controller: Policy, steps: Any, texts: list[str]) -> float:
    """MSE of the first executed action of each demonstration window's deterministic chunk."""
    state = np.asarray(steps.obs["state"], dtype=np.float32)
    obs = {"state": state, SUBGOAL_KEY: embed_text(texts, 32)}
    config = controller.config
    windows = DemoWindows(obs, steps.actions, steps.episode_index, config.n_obs_steps, config.horizon)  # type: ignore[attr-defined]
    batch = windows.batch(np.arange(len(windows)))
    chunk, _ = controller.sample_chunks(batch.obs, deterministic=True)  # type: ignore[operator]
    first = chunk[:, config.n_obs_steps - 1]  # type: ignore[attr-defined]
    return float(((first - torch.as_tensor(steps.actions)) ** 2).mean())


@pytest.mark.slow
def test_the_subgoal_controller_reads_its_subgoal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    torch.set_num_threads(1)
    bench = bench_module()
    summary, steps = bench.demonstrations(20)
    assert summary.success_rate == 1.0
    labels = relabel_episodes(np.asarray(steps.obs["state"]), steps.episode_index)
    true = [PICKPLACE_SUBGOALS[i] for i in labels]
    shuffled = [PICKPLACE_SUBGOALS[i] for i in np.random.default_rng(0).permutation(labels)]
    bench.train_controller(steps, "subgoal", 0, 400, tmp_path / "subgoal")
    bench.train_controller(steps, "instruction", 0, 400, tmp_path / "instruction")
    subgoal = Policy.from_pretrained(tmp_path / "subgoal").eval()
    flat = Policy.from_pretrained(tmp_path / "instruction").eval()
    with_true = action_error(subgoal, steps, true)
    with_shuffled = action_error(subgoal, steps, shuffled)
    instruction_only = action_error(flat, steps, [PICKPLACE_INSTRUCTION] * len(labels))
    assert with_true < 0.6 * instruction_only, (with_true, instruction_only)
    assert with_shuffled > 3 * with_true, (with_shuffled, with_true)
