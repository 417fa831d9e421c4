"""Observation conventions: the single-env and vector Dict wrappers agree."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from omnigym.envs.wrappers import ObservationDict, VectorObservationDict, dict_space_for
from omnigym.platform.vec_env import EnvConfig, make_vec_env


def test_dict_space_for_state_and_image():
    state = dict_space_for(spaces.Box(-1, 1, (2, 3), np.float64))
    assert (
        list(state.spaces) == ["state"]
        and state["state"].shape == (6,)
        and state["state"].dtype == np.float32
    )
    image = dict_space_for(spaces.Box(0, 255, (8, 8, 3), np.uint8))
    assert list(image.spaces) == ["image"] and image["image"].shape == (8, 8, 3)
    with pytest.raises(TypeError, match="only Box"):
        dict_space_for(spaces.Discrete(3))


@pytest.mark.parametrize("mode", ["same_step", "next_step", "disabled"])
def test_vector_wrapper_matches_per_env_wrapper(mode):
    envs = make_vec_env(EnvConfig(id="Pendulum-v1", num_envs=2, max_episode_steps=3, autoreset_mode=mode))
    assert isinstance(envs, VectorObservationDict)
    singles = [ObservationDict(gym.make("Pendulum-v1", max_episode_steps=3)) for _ in range(2)]
    obs, _ = envs.reset(seed=[5, 6])
    single_obs = [env.reset(seed=s)[0]["state"] for env, s in zip(singles, [5, 6], strict=True)]
    assert np.array_equal(obs["state"], np.stack(single_obs))
    assert envs.single_observation_space == singles[0].observation_space
    action = np.zeros((2, 1), np.float32)
    for _ in range(3):
        obs, _, _, trunc, info = envs.step(action)
        expected = [env.step(action[0])[0]["state"] for env in singles]
    assert trunc.all()
    if mode == "same_step":  # the final observation is in info, wrapped like the others
        finals = np.stack([f["state"] for f in info["final_obs"]])
        assert np.array_equal(finals, np.stack(expected))
    else:
        assert np.array_equal(obs["state"], np.stack(expected))
    envs.close()
