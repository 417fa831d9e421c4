"""``init_from`` for on-policy runs: a cloned policy's weights start RL fine-tuning, mismatches refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from omnigym.core.registry import POLICIES
from omnigym.platform.cli import main
from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers.on_policy import OnPolicyTrainer
from omnigym.platform.vec_env import make_env

FLOW = {"down_dims": (16, 32), "state_hidden_sizes": (16,), "n_action_steps": 1, "num_inference_steps": 4}
STEPS = [
    "env=pushcube", "env.num_envs=2", "algo.num_steps=4", "total_steps=8", "eval.every_steps=0",
    "log.progress=false", "log.tensorboard=false",
]  # fmt: skip
RUN = [
    *STEPS, "policy=flow", "policy.down_dims=[16,32]", "policy.state_hidden_sizes=[16]",
    "policy.n_action_steps=1", "policy.num_inference_steps=4", "policy.rl_chain=true",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the cwd


@pytest.fixture
def clone(tmp_path: Path) -> torch.nn.Module:
    """A behaviour-cloned-like ``flow`` policy (perturbed weights, distinct EMA) saved to tmp/bc."""
    env = make_env("omnigym/PushCube-v0")
    cls = POLICIES.get("flow")
    torch.manual_seed(0)
    policy = cls(cls.config_class(**FLOW), env.observation_space, env.action_space)
    env.close()
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.05 * torch.randn_like(param))
        assert policy.ema_model is not None
        for param in policy.ema_model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    policy.save_pretrained(tmp_path / "bc")
    return policy


def test_the_run_starts_from_the_clones_ema_weights_with_the_chain_prefix_frozen(
    clone, tmp_path: Path
) -> None:
    overrides = [*RUN, "policy.ft_denoising_steps=2", f"init_from={tmp_path / 'bc'}"]
    config = load_experiment("ppo_cartpole", [*overrides, f"run_dir={tmp_path / 'run'}"])
    trainer = OnPolicyTrainer(config, tmp_path / "run")
    policy = trainer.policy
    # acting and training weights: the clone's EMA copy (the better one after BC), as DPPO starts
    for name, value in clone.ema_model.state_dict().items():
        torch.testing.assert_close(policy.model.state_dict()[name], value)
        torch.testing.assert_close(policy.frozen_model.state_dict()[name], value)  # the first 2 of 4 steps
    torch.testing.assert_close(policy.state_normalizer.low, clone.state_normalizer.low)
    assert policy.config.frozen_chain_prefix and not any(
        p.requires_grad for p in policy.frozen_model.parameters()
    )
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    trainer.train()
    moved = any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    assert moved  # one PPO update trained the loaded weights
    for name, value in clone.ema_model.state_dict().items():
        torch.testing.assert_close(policy.frozen_model.state_dict()[name], value)  # never trained


def test_an_rl_run_directory_passes_on_its_trained_weights_and_frozen_prefix(clone, tmp_path: Path) -> None:
    first = tmp_path / "first"
    chain = ["policy.ft_denoising_steps=2"]
    assert (
        main(["train", "ppo_cartpole", *RUN, *chain, f"init_from={tmp_path / 'bc'}", f"run_dir={first}"]) == 0
    )
    config = load_experiment("ppo_cartpole", [*RUN, *chain, f"init_from={first}"])
    trainer = OnPolicyTrainer(config, tmp_path / "second")
    saved = POLICIES.get("flow").from_pretrained(sorted((first / "checkpoints").iterdir())[-1] / "policy")
    # the RL run acted with (and trained) its model weights, not its stale EMA copy; the prefix is the clone's
    for name, value in saved.model.state_dict().items():
        torch.testing.assert_close(trainer.policy.model.state_dict()[name], value)
    for name, value in clone.ema_model.state_dict().items():
        torch.testing.assert_close(trainer.policy.frozen_model.state_dict()[name], value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([*RUN, "policy.down_dims=[8,16]"], "weights do not fit the run's policy"),
        ([*STEPS, "policy=mlp"], "holds a 'flow' policy but the run's policy.type is 'mlp'"),
        ([*RUN, "init_from=nowhere/bc"], "init_from: nowhere/bc does not exist"),
    ],
)
def test_a_source_that_does_not_fit_is_one_clear_error(
    clone, tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], message: str
) -> None:
    args = ["train", "ppo_cartpole", f"init_from={tmp_path / 'bc'}", *overrides]
    code = main([*args, f"run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[omnigym] ")]
    assert code == 2 and len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "run").exists()  # nothing made
