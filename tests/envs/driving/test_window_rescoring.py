"""An episode's window, rescored from its recorded track with the scoring building blocks, gives
the sub-scores, PDMS and EPDMS the env reported (the human's false-positive filter included)."""

from __future__ import annotations

import numpy as np
import pytest

from omnigym.envs.driving import metrics
from omnigym.envs.driving.env import DrivingEnv
from omnigym.envs.driving.planner import constant_velocity_plan
from omnigym.envs.driving.scene import DT, HISTORY_STEPS, HORIZON_STEPS, LIGHT_RED
from omnigym.envs.driving.trajectory_scores import score_trajectories

EXACT = ("nc", "dac", "ddc", "tlc", "c", "lk", "hc")
"""Sub-scores the env's per-step checks and the trajectory scorer compute the same way."""


def _drive(env: DrivingEnv, policy: str, scene: int) -> dict:
    obs, _ = env.reset(seed=scene)
    sim = env.vector.sim
    done = False
    while not done:
        if policy == "constant_velocity":
            action = constant_velocity_plan(sim.ego.speed[:1])[0]
        else:
            action = np.asarray(obs[policy])
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return info


def _rescore(env: DrivingEnv) -> tuple[dict[str, float], np.ndarray]:
    """The window's sub-scores from the recorded track; a window cut short repeats its end (as the env)."""
    sim = env.vector.sim
    end = int(sim.time[0])
    steps = np.minimum(np.arange(HISTORY_STEPS, HISTORY_STEPS + HORIZON_STEPS + 1), end)
    track = sim.ego_pose[0, steps].astype(np.float64)
    speed = np.linalg.norm(np.diff(track[:, :2], axis=0, prepend=track[:1, :2]), axis=1) / DT
    speed[0] = speed[1]
    scores = score_trajectories(
        sim.world(np.array([0])),
        track[None],
        speed[None],
        sim.agent_pose[0, steps][None].astype(np.float64),
        sim.agent_speed[0, steps][None].astype(np.float64),
        sim.agent_valid[0, steps][None],
        (sim.light_state[0, steps] == LIGHT_RED)[None],
        ego_history=sim.ego_pose[0, :HISTORY_STEPS][None].astype(np.float64),
    )
    return {name: float(getattr(scores, name)[0]) for name in (*EXACT, "ttc")}, sim.human[0, 0]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One-window episodes (4 s) on test scenes; the privileged experts' plans in the observation."""
    return DrivingEnv(
        action_mode="plan",
        split="test",
        num_scenes=213,
        scene={"episode_seconds": 4.0},
        privileged=["log_replay", "pdm_closed"],
        cache_dir=str(tmp_path_factory.mktemp("scenes")),
    )


@pytest.mark.parametrize(
    "policy, scene",
    [
        ("log_replay", 0),
        ("pdm_closed", 1),
        ("log_replay", 212),
        ("constant_velocity", 1),
        ("constant_velocity", 4),
    ],
)
def test_rescored_window_matches_the_env(env, policy, scene):
    info = _drive(env, policy, scene)
    ours, human = _rescore(env)
    for name in EXACT:
        assert info[name] == ours[name], name
    if policy == "constant_velocity":
        # the env's TTC looks 0.9 s ahead from every step, past the window's end into the log
        assert info["ttc"] <= ours["ttc"]
    else:
        assert info["ttc"] == ours["ttc"]
    row = {name: float(info[name]) for name in metrics.SUB_METRICS}
    # PDMS (NC is 0 or 1 here, so v1.1's and v2's progress rules agree)
    assert row["nc"] in (0.0, 1.0)
    pdms = row["nc"] * row["dac"] * (5 * row["ttc"] + 5 * row["ep"] + 2 * row["c"]) / 12
    assert info["pdms"] == pytest.approx(pdms, abs=1e-12)
    # EPDMS with the human's false-positive filter: what the human failed counts as passed
    passed = {name: 1.0 if human[i] == 0 else row[name] for i, name in enumerate(metrics.SUB_METRICS)}
    product = passed["nc"] * passed["dac"] * passed["ddc"] * passed["tlc"]
    weighted = 5 * passed["ep"] + 5 * passed["ttc"] + 2 * passed["lk"] + 2 * passed["hc"] + 2 * passed["ec"]
    assert info["epdms"] == pytest.approx(product * weighted / 16, abs=1e-12)
    if scene == 212:  # the logged human is uncomfortable in this window: HC filtered for the agent
        assert human[metrics.SUB_METRICS.index("hc")] == 0.0
    if policy == "constant_velocity" and scene == 1:  # fails before the window ends
        assert info["failed"] == 1.0 and int(env.vector.sim.time[0]) < HISTORY_STEPS + HORIZON_STEPS
