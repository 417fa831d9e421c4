"""One-line errors: each user mistake is one stderr line naming the key or flag that fixes it, exit 2.

Every case runs ``main([...])`` in-process and checks the line's shape (``omnigym <cmd>: error:``),
that it names the fix and that no traceback leaks; plus a conformance check of every registered
policy's declared spaces.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import omnigym.platform.memory as memory
from omnigym.core.registry import POLICIES
from omnigym.platform.cli import main
from omnigym.platform.collect import preflight_rollout_memory
from omnigym.platform.memory import InsufficientMemoryError
from omnigym.platform.policy_fit import IncompatibleSpacesError, build_policy, check_saved_policy
from omnigym.platform.vec_env import EnvConfig
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

TRAIN_QUICK = ["log.progress=false", "log.tensorboard=false", "eval.episodes=1"]


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs (runs/) land in a scratch directory."""
    monkeypatch.chdir(tmp_path)


def one_error_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    """The single stderr line of a failed command, checked for its shape (progress notices such as
    the driving kernels' first compilation, ``[omnigym] ...``, aside)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[omnigym] ")]
    assert len(lines) == 1, f"expected one stderr line, got:\n{err}"
    assert lines[0].startswith(f"omnigym {command}: error: "), lines[0]
    assert "Traceback" not in err
    return lines[0]


# --- 1. unknown env id ----------------------------------------------------------------------------
def test_eval_unknown_env_id_suggests_matches_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--policy", "random", "--env", "CartPol-v1"]) == 2
    line = one_error_line(capsys, "eval")
    assert "--env" in line and "unknown env id 'CartPol-v1'" in line
    assert "'CartPole-v1'" in line and "omnigym list --all-envs" in line


def test_train_unknown_env_id_names_env_id(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", "ppo_cartpole", "env.id=NoSuch-v0", *TRAIN_QUICK]) == 2
    line = one_error_line(capsys, "train")
    assert "env.id" in line and "'NoSuch-v0'" in line and "omnigym list --all-envs" in line
    assert not (tmp_path / "runs").exists()


# --- 2. misspelt env kwarg ------------------------------------------------------------------------
def test_eval_misspelt_env_kwarg_names_it_and_the_accepted_ones(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["eval", "--policy", "random", "--env", "omnigym/Maze-v0", "--env-kwargs", '{"sise": 7}']
    assert main(args) == 2
    line = one_error_line(capsys, "eval")
    assert "--env-kwargs" in line and "'sise'" in line and "did you mean 'size'" in line
    assert "action_space" in line.split("accepts:")[1]  # the env config's fields are listed


def test_train_misspelt_env_kwarg_names_the_config_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "ppo_maze", "env.kwargs.sise=7", "env.num_envs=1", *TRAIN_QUICK]) == 2
    line = one_error_line(capsys, "train")
    assert "env.kwargs.sise" in line and "did you mean 'size'" in line


# --- 3. a saved policy on an env with other spaces ------------------------------------------------
def test_eval_saved_policy_on_other_action_space(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = MLPPolicy(MLPPolicyConfig(), spaces.Dict(state=spaces.Box(-1, 1, (4,))), spaces.Discrete(2))
    policy.save_pretrained(tmp_path / "cartpole_policy")
    assert main(["eval", "--policy", "cartpole_policy", "--env", "Pendulum-v1"]) == 2
    line = one_error_line(capsys, "eval")
    assert "Discrete(2)" in line and "Pendulum-v1 has Box actions" in line and "--env" in line


def test_eval_saved_policy_on_other_observation_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = MLPPolicy(MLPPolicyConfig(), spaces.Dict(state=spaces.Box(-1, 1, (3,))), spaces.Discrete(2))
    policy.save_pretrained(tmp_path / "small_obs")
    assert main(["eval", "--policy", "small_obs", "--env", "CartPole-v1"]) == 2
    line = one_error_line(capsys, "eval")
    assert "observation 'state'" in line and "(3,)" in line and "(4,)" in line


def test_saved_policy_names_the_env_it_was_trained_on(tmp_path: Path) -> None:
    policy = MLPPolicy(MLPPolicyConfig(), spaces.Dict(state=spaces.Box(-1, 1, (4,))), spaces.Discrete(2))
    with pytest.raises(IncompatibleSpacesError, match=r"--env CartPole-v1 \(the env it was trained on\)"):
        check_saved_policy(
            policy, spaces.Dict(state=spaces.Box(-1, 1, (3,))), spaces.Box(-2, 2, (1,)),
            source="runs/x", env_id="Pendulum-v1", trained_on="CartPole-v1",
        )  # fmt: skip


# --- 4. policy type vs action space ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "env", "env_kwargs", "expected"),
    [
        ("flow", "CartPole-v1", None, ["Discrete", "'flow'", "Box", "--policy mlp"]),
        (
            "cnn",
            "omnigym/Maze-v0",
            '{"action_space": "text"}',
            ["Text", "'cnn'", '"action_space": "discrete"'],
        ),
        ("vlm", "omnigym/PushCube-v0", None, ["Box", "'vlm'", "Text", "--policy mlp"]),
        (
            "vlm",
            "omnigym/DrivingVLM-v0",
            None,
            ["Box(-40..120, (8, 3), float32)", "'vlm'", '--env-kwargs \'{"action_space": "text"}\''],
        ),
    ],
)
def test_eval_policy_that_cannot_act_in_the_action_space(
    policy: str, env: str, env_kwargs: str | None, expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "--policy", policy, "--env", env] + (["--env-kwargs", env_kwargs] if env_kwargs else [])
    assert main(args) == 2
    line = one_error_line(capsys, "eval")
    for text in expected:
        assert text in line


def test_build_policy_words_the_fix_as_config_keys() -> None:
    obs = spaces.Dict(image=spaces.Box(0, 255, (48, 48, 3), dtype=np.uint8), text=spaces.Text(64))
    with pytest.raises(IncompatibleSpacesError) as info:
        build_policy(
            "cnn", None, obs, spaces.Text(64), env_id="omnigym/Maze-v0", env_kwargs={"action_space": "text"}
        )
    message = str(info.value)
    assert "env.kwargs.action_space=discrete" in message and "policy=vlm" in message
    with pytest.raises(IncompatibleSpacesError, match=r"CartPole-v1 has Discrete actions .*policy=mlp"):
        build_policy(
            "vlm", None, spaces.Dict(state=spaces.Box(-1, 1, (4,))), spaces.Discrete(2), env_id="CartPole-v1"
        )


@pytest.mark.parametrize(
    ("overrides", "key"),
    [(["policy=flow"], "policy=mlp"), (["policy=vlm", "policy.model=tiny:idefics3"], "policy=mlp")],
)
def test_train_policy_that_cannot_act_in_the_action_space(
    overrides: list[str], key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "ppo_cartpole", *overrides, *TRAIN_QUICK]) == 2
    line = one_error_line(capsys, "train")
    assert "Discrete" in line and key in line


@pytest.mark.parametrize("name", POLICIES.names())
def test_every_policy_accepts_its_declared_action_spaces_and_refuses_others(name: str) -> None:
    """Conformance: a declared space passes the check, any other fails with a message naming both."""
    policy_cls = POLICIES.get(name)
    assert policy_cls.action_spaces, f"{name} declares no action_spaces"
    image = spaces.Box(0, 255, (36, 36, 3), dtype=np.uint8)  # what a vla conditions on
    obs = spaces.Dict(state=spaces.Box(-1, 1, (4,)), image=image, text=spaces.Text(32))
    samples: list[spaces.Space[Any]] = [
        spaces.Box(-1, 1, (2,)), spaces.Discrete(3), spaces.Text(16), spaces.MultiBinary(2),
    ]  # fmt: skip
    for space in samples:
        if isinstance(space, policy_cls.action_spaces):
            policy_cls.check_spaces(None, obs, space)
        else:
            with pytest.raises(
                IncompatibleSpacesError, match=rf"policy '{name}' acts in .*{type(space).__name__}"
            ):
                policy_cls.check_spaces(None, obs, space)


@pytest.mark.parametrize("name", ["mlp", "cnn", "random"])
def test_declared_spaces_match_what_the_policy_builds_on(name: str) -> None:
    """The declaration is no looser than the constructor: a declared space builds, others are refused."""
    obs = spaces.Dict(state=spaces.Box(-1, 1, (4,)), image=spaces.Box(0, 255, (36, 36, 3), dtype=np.uint8))
    for space in (spaces.Box(-1, 1, (2,)), spaces.Discrete(3)):
        build_policy(name, None, obs, space)
    with pytest.raises(IncompatibleSpacesError):
        build_policy(name, None, obs, spaces.Text(8))


def test_check_spaces_names_a_missing_obs_key() -> None:
    config = MLPPolicyConfig(obs_keys=("image",))
    with pytest.raises(IncompatibleSpacesError, match=r"'image' \(policy.obs_keys\).*\['state'\]"):
        MLPPolicy.check_spaces(config, spaces.Dict(state=spaces.Box(-1, 1, (4,))), spaces.Discrete(2))


# --- 5. bad JSON in a flag ------------------------------------------------------------------------
def test_bad_json_names_the_flag_the_position_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--policy", "random", "--env", "CartPole-v1", "--env-kwargs", "{split: test}"]) == 2
    line = one_error_line(capsys, "eval")
    assert "--env-kwargs is not valid JSON" in line and "line 1 column 2" in line
    assert '\'{"split": "test"}\'' in line


# --- 6. impossible sizes --------------------------------------------------------------------------
def test_train_rollout_larger_than_memory_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(memory, "available_memory", lambda device="cpu": 64 * 1024)
    assert main(["train", "ppo_cartpole", "env.num_envs=64", *TRAIN_QUICK]) == 2
    line = one_error_line(capsys, "train")
    assert "env.num_envs=64" in line and "algo.num_steps=32" in line and "64.0 KiB" in line
    assert not (tmp_path / "runs").exists()


def test_train_two_million_envs_is_refused_before_making_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "available_memory", lambda device="cpu": 8 * 2**30)
    start = time.perf_counter()
    assert main(["train", "ppo_cartpole", "env.num_envs=2000000", *TRAIN_QUICK]) == 2
    assert time.perf_counter() - start < 5
    assert "env.num_envs=2000000" in one_error_line(capsys, "train")


def test_preflight_refuses_two_million_envs_from_one_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_memory", lambda device="cpu": 8 * 2**30)
    with pytest.raises(InsufficientMemoryError, match=r"env.num_envs=2000000 .* GiB, but only 8.0 GiB"):
        preflight_rollout_memory(EnvConfig(id="CartPole-v1", num_envs=2_000_000), 32, MLPPolicyConfig())


def test_replay_buffer_larger_than_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from omnigym.platform.buffers import ReplayBuffer

    monkeypatch.setattr(memory, "available_memory", lambda device="cpu": 2**20)
    obs = spaces.Dict(state=spaces.Box(-1, 1, (17,)))
    with pytest.raises(
        InsufficientMemoryError, match=r"1000000 transitions \(algo.buffer_size\).*lower algo"
    ):
        ReplayBuffer(obs, spaces.Box(-1, 1, (6,)), 1_000_000)


# --- 7. local before remote -----------------------------------------------------------------------
@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection attempt fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the network was used")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.mark.parametrize("offline", [True, False])
@pytest.mark.usefixtures("no_network")
def test_missing_local_path_fails_at_once_without_network(
    offline: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    start = time.perf_counter()
    assert main(["eval", "--policy", "runs/nosuch", "--env", "CartPole-v1"]) == 2
    assert time.perf_counter() - start < 2
    line = one_error_line(capsys, "eval")
    assert "--policy runs/nosuch: no such file or directory" in line


@pytest.mark.usefixtures("no_network")
def test_uncached_hub_id_offline_names_hf_hub_offline(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    assert main(["eval", "--policy", "nosuch-org/nosuch-model", "--env", "CartPole-v1"]) == 2
    assert time.perf_counter() - start < 2
    assert "HF_HUB_OFFLINE" in one_error_line(capsys, "eval")
