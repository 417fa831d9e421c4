"""Planner over controller vs the same controller told only the task, on the two-stage push.

``omnigym/PushCubeTwoStage-v0``: push the cube to the blue marker, then to the red target. The
state holds both points but not whether the cube has already been at the marker, so a controller
acting on the observation must infer the stage from the scene, while the ``scripted`` planner
remembers it and names it ("push the cube to the blue marker" / "... to the red target").

The protocol of ``bench/hierarchical_pickplace.py``, whose functions this script runs with its
task set to ``pushcube_two_stage``: stochastic ``pushcube_two_stage_expert`` demonstrations
(action noise 0.1) as a Minari dataset; each step relabelled with the stage the expert acted in
(:func:`~omnigym.policies.hierarchical.subgoals.relabel_two_stage`); per seed, two flow
controllers of the same architecture behaviour-cloned with the same steps and seed, one
conditioned on each step's sub-goal, one on the task instruction; both evaluated deterministically
through ``hierarchical`` (planner ``scripted`` vs ``instruction``) on the same held-out episodes.

Last line: one JSON object; ``ratio`` = mean success(planner + controller) / mean
success(instruction-only controller) over the seeds, with the per-seed figures, the mean paired
gain and its standard error.

Usage: ``omnigym bench hierarchical_two_stage [--quick]`` (quick: 3 seeds, 100 demonstrations,
3,000 BC steps per controller, 100 test episodes; full: 5 seeds, 200 demonstrations, 6,000 steps,
200 episodes).
docs/policies.md has the measured figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hierarchical_pickplace as base

DURATIONS = {"quick": "54 min (beside 3 jobs)", "full": "not recorded"}
"""On a 2-core CPU: docs/policies.md, "Two-stage push" (the quick run; the five-seed table comes from two runs
at 100 test episodes, 31 and 27 min, not from one full run)."""

CONTROLLER = {"horizon": 8, "n_action_steps": 4, "down_dims": [64, 128], "num_inference_steps": 10}
"""The PushCube bench's flow policy (``bench/pushcube_rl_finetune.py``): chunks of 8 with 4 executed.
With ``hierarchical``'s default (one action per chunk, a (32, 64) U-Net) neither controller solved
the task (0.00 and 0.03 of 30 episodes after 3,000 steps on 200 demonstrations)."""

BUDGETS = {
    "quick": {"seeds": 3, "demos": 100, "bc_steps": 3000, "episodes": 100},
    "full": {"seeds": 5, "demos": 200, "bc_steps": 6000, "episodes": 200},
}
"""Larger than PickPlace's: an episode holds two pushes (about 43 noisy expert steps)."""

if __name__ == "__main__":
    base.TASK_NAME = "pushcube_two_stage"
    base.CONTROLLER = CONTROLLER
    base.BUDGETS = BUDGETS
    base.main("hierarchical_two_stage", __doc__)
