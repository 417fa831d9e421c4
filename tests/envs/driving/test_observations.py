"""The lane search of the ``lanes`` key: its pruned search picks the lanes a full search picks."""

import numpy as np

from omnigym.envs.driving.observations import COARSE, LaneSamples, LaneTracker, ObservationConfig


def test_lane_choice_matches_a_full_search():
    rng = np.random.default_rng(0)
    config = ObservationConfig(num_lanes=6)
    tracker = LaneTracker(num_slots=8, max_lanes=40, max_samples=120, config=config)
    scenes = []
    for slot in range(8):
        lanes = []
        for _ in range(rng.integers(3, 40)):  # some scenes have fewer lanes than the key holds
            start, heading = rng.uniform(-150, 150, 2), rng.uniform(-np.pi, np.pi)
            length = rng.integers(2, 120)
            bend = np.cumsum(rng.normal(0, 0.05, length))
            points = start + 2.0 * np.cumsum(np.stack([np.cos(heading + bend), np.sin(heading + bend)], 1), 0)
            lanes.append(points)
        tracker.load(slot, LaneSamples.of(lanes))
        scenes.append(lanes)
    ego = np.concatenate([rng.uniform(-150, 150, (8, 2)), rng.uniform(-np.pi, np.pi, (8, 1))], axis=1)
    features = tracker.features(ego)
    for slot, lanes in enumerate(scenes):
        coarse = [np.min(np.sum((lane[::COARSE] - ego[slot, :2]) ** 2, axis=1)) for lane in lanes]
        full = np.argsort(coarse, kind="stable")[: config.num_lanes]
        chosen = tracker.selected[slot].tolist()
        real = [lane for lane in chosen if lane < len(lanes)]
        assert real == full.tolist(), f"slot {slot}: {real} != {full.tolist()}"
        for row, lane in enumerate(chosen):
            if lane >= len(lanes):  # a short scene: the rest of the rows are empty
                assert not features[slot, row].any()
                continue
            # each row starts at the lane's sample nearest to the ego, in the ego frame
            points = lanes[lane]
            nearest = np.min(np.hypot(*(points - ego[slot, :2]).T))
            assert features[slot, row, 0, 2] == 1.0
            assert np.hypot(*features[slot, row, 0, :2]) <= nearest + 2.0 + 1e-4
