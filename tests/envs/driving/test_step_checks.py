"""The compiled per-step checks agree with the metrics' batched building blocks, step by step."""

import numpy as np
import pytest

from omnigym.envs.driving import agent_checks, map_checks, metrics
from omnigym.envs.driving.agents import constant_velocity_forecast
from omnigym.envs.driving.comfort import comfort_violations
from omnigym.envs.driving.env import DrivingVectorEnv
from omnigym.envs.driving.scene import DT
from omnigym.envs.driving.simulator import COMFORT_CONTEXT
from omnigym.envs.driving.step_results import STEP_COMPONENTS


def reference_checks(sim) -> dict[str, np.ndarray]:
    """This step's checks from the batched building blocks (before the simulator's own pass).

    Works on copies, so the simulator's state is left as it is.
    """
    rows, t = np.arange(sim.n), sim.time
    frame = sim.agents_now()
    world = sim.world()
    state = metrics.StepState(
        sim.ego.pose, sim.ego.speed, frame.pose, frame.speed, frame.valid, sim.light_red[rows, t]
    )
    area = map_checks.ego_area(world, sim.ego.pose)
    nc, colliding = agent_checks.collisions(world, state, area, sim.collided)
    collided = sim.collided | colliding
    offsets = np.round(np.asarray(metrics.TTC_OFFSETS) / DT).astype(np.int64)
    if sim.reactive is None:
        index = np.minimum(t[:, None] + offsets, sim.max_steps - 1)
        future_pose = sim.agent_pose[rows[:, None], index]
        future_valid = sim.agent_valid[rows[:, None], index]
    else:
        future = constant_velocity_forecast(frame, offsets * DT)
        future_pose, future_valid = future.pose, future.valid
    ttc = agent_checks.ttc_ok(
        world,
        sim.ego.pose,
        sim.ego.speed,
        area,
        future_pose,
        future_valid,
        collided,
        tolerated=sim.ttc_tolerated.copy(),
    )
    red = map_checks.red_light_violation(world, sim.ego.pose, sim.light_red[rows, t])
    station, lateral, _ = map_checks.project_to_route(world, sim.ego.pose[:, :2], hint=sim.route_index)
    context = sim.ego_pose[rows[:, None], np.maximum(t[:, None] - np.arange(COMFORT_CONTEXT - 1, -1, -1), 0)]
    progress = station - sim.station
    ep = np.where(
        sim.reference_step > 0, np.clip(progress / np.maximum(sim.reference_step, 1e-9), 0.0, 1.0), 1.0
    )
    return {
        "nc": nc,
        "dac": (~area.non_drivable).astype(float),
        "tlc": (~red).astype(float),
        "ttc": ttc.astype(float),
        "ep": ep,
        "c": (~comfort_violations(context, DT)[:, -1]).astype(float),
        "station": station,
        "lateral": lateral,
    }


@pytest.mark.parametrize("traffic", ["log", "idm"])
def test_compiled_step_checks_match_the_building_blocks(driving_kwargs, traffic):
    env = DrivingVectorEnv(num_envs=4, action_mode="control", traffic=traffic, **driving_kwargs)
    env.reset(seed=3)
    sim = env.sim
    compiled = sim._step_scores
    pairs = []

    def both() -> np.ndarray:
        expected = reference_checks(sim)  # from the state before the compiled pass updates it
        actual = compiled()
        columns = dict(zip(STEP_COMPONENTS, actual.T.copy(), strict=True))
        pairs.append((expected, columns, sim.station.copy(), sim.lateral.copy()))
        return actual

    sim._step_scores = both  # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    for _ in range(150):
        # bicycle the ego: agents, lights, boundaries and comfort limits all get exercised
        env.step(np.stack([rng.uniform(-4, 3, 4), rng.uniform(-0.6, 0.6, 4)], axis=1))
    assert len(pairs) == 150
    seen = {name: set() for name in ("dac", "ttc", "c")}
    for expected, actual, station, lateral in pairs:
        for name in ("nc", "dac", "tlc", "ttc", "ep", "c"):
            np.testing.assert_allclose(actual[name], expected[name], atol=1e-12, err_msg=name)
        np.testing.assert_allclose(station, expected["station"], atol=1e-9)
        np.testing.assert_allclose(lateral, expected["lateral"], atol=1e-9)
        for name in seen:
            seen[name].update(expected[name].tolist())
    # the rollout crossed both outcomes of these checks
    assert all(values == {0.0, 1.0} for values in seen.values()), seen


def test_ttc_forecasts_reactive_agents_like_the_constant_velocity_forecast():
    """TTC on agents now plus their speeds (reactive traffic) equals TTC on their forecast poses.

    Random egos and agents near them, moving in all directions: many agents first overlap the
    projected ego at a later offset, so forecasting them the wrong way would change the outcome.
    """
    from omnigym.envs.driving.agent_checks import ttc_ok_at
    from omnigym.envs.driving.agents import AgentFrame

    rng = np.random.default_rng(0)
    offsets = np.asarray(metrics.TTC_OFFSETS)
    ego_size, rear_axle = np.array([4.6, 2.0]), 1.5
    outcomes, tolerated_any = [], False
    for _ in range(400):
        num_agents = 6
        pose = np.zeros((1, num_agents, 3), np.float32)
        pose[0, :, :2] = rng.uniform(-15, 25, (num_agents, 2))
        pose[0, :, 2] = rng.uniform(-np.pi, np.pi, num_agents)
        speed = rng.uniform(0, 15, (1, num_agents)).astype(np.float32)
        valid = rng.random((1, num_agents)) < 0.9
        size = np.tile([4.5, 1.9], (num_agents, 1))
        ego_pose, ego_speed = np.array([0.0, 0.0, rng.uniform(-0.3, 0.3)]), rng.uniform(2, 15)
        future = constant_velocity_forecast(AgentFrame(pose, speed, valid), offsets)
        results = []
        for inline in (False, True):
            tolerated = np.zeros(num_agents, bool)
            ok = ttc_ok_at(
                ego_pose, ego_speed, ego_size, rear_axle, offsets,
                pose[0][None] if inline else future.pose[0],
                valid[0][None] if inline else np.ascontiguousarray(future.valid[0]),
                np.zeros(len(offsets), np.int64) if inline else np.arange(len(offsets)),
                size, False, np.zeros(num_agents, bool), tolerated,
                np.inf, speed[0][None] if inline else None,
            )  # fmt: skip
            results.append((ok, tolerated.tolist()))
        assert results[0] == results[1]
        outcomes.append(results[0][0])
        tolerated_any |= any(results[0][1])
    assert {True, False} <= set(outcomes) and tolerated_any
