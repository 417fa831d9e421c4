"""Behaviour cloning with each chunk policy actually learns a state -> action map."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy
from omnigym.platform.cli import main
from omnigym.platform.datasets import load_dataset_steps
from omnigym.platform.trainers.imitation import ImitationConfig, train_imitation
from omnigym.policies.chunking.data import DemoWindows
from omnigym.policies.diffusion.policy import DiffusionPolicy, DiffusionPolicyConfig
from omnigym.policies.flow.meanflow import MeanFlowPolicy, MeanFlowPolicyConfig
from omnigym.policies.flow.policy import FlowPolicy, FlowPolicyConfig

# one U-Net level keeps a training step ~10 ms (30 ms for MeanFlow's JVP)
SMALL = {"n_obs_steps": 1, "horizon": 4, "n_action_steps": 1, "down_dims": (32,), "state_hidden_sizes": (64,)}
SMALL_TIME = {"time_embed_dim": 32}
LOSS = {"diffusion": "train/loss_denoise", "flow": "train/loss_flow", "meanflow": "train/meanflow_mse"}


def target(states: np.ndarray) -> np.ndarray:
    return np.stack([-states[:, 0], 0.5 * states[:, 1]], axis=1).astype(np.float32)


@pytest.mark.parametrize(
    ("cls", "config"),
    [
        (DiffusionPolicy, DiffusionPolicyConfig),
        (FlowPolicy, FlowPolicyConfig),
        (MeanFlowPolicy, MeanFlowPolicyConfig),
    ],
    ids=["diffusion", "flow", "meanflow"],
)
def test_bc_learns_a_state_to_action_map(cls: type, config: type) -> None:
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    obs_space = spaces.Dict({"state": spaces.Box(-1, 1, (2,), np.float32)})
    torch.manual_seed(0)
    policy = cls(config(**SMALL, **SMALL_TIME), obs_space, spaces.Box(-1, 1, (2,), np.float32))
    policy.fit_normalizers({"state": states}, target(states))
    windows = DemoWindows({"state": states}, target(states), np.arange(256), n_obs_steps=1, horizon=4)
    history = train_imitation(
        policy,
        windows,
        ImitationConfig(steps=250, batch_size=64, learning_rate=3e-3, warmup_steps=0, log_every=1),
    )
    losses = [h[LOSS[cls.name]] for h in history]
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    test = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    sampled = policy.act({"state": torch.as_tensor(test)}).action.numpy()
    error = np.abs(sampled - target(test)).mean()
    assert error < 0.12, f"mean absolute error {error:.3f} (predicting 0: 0.375)"  # measured 0.04-0.07


def test_best_dir_keeps_the_policy_of_the_best_evaluation(tmp_path: Path) -> None:
    """Success decides, then return; the copy saved is the policy as it was at that evaluation."""
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, (64, 2)).astype(np.float32)
    obs_space = spaces.Dict({"state": spaces.Box(-1, 1, (2,), np.float32)})
    torch.manual_seed(0)
    box = spaces.Box(-1, 1, (2,), np.float32)
    policy = FlowPolicy(FlowPolicyConfig(**SMALL, **SMALL_TIME), obs_space, box)
    policy.fit_normalizers({"state": states}, target(states))
    windows = DemoWindows({"state": states}, target(states), np.arange(64), n_obs_steps=1, horizon=4)
    scripted = iter([(0.2, 5.0), (0.5, 1.0), (0.5, 0.5), (0.3, 9.0)])  # the 2nd is best
    snapshots = []

    def evaluate(p: FlowPolicy) -> dict[str, float]:
        snapshots.append({k: v.clone() for k, v in p.state_dict().items()})
        success, ret = next(scripted)
        return {"eval/success_rate": success, "eval/return_mean": ret}

    config = ImitationConfig(
        steps=8, batch_size=16, learning_rate=3e-3, warmup_steps=0, log_every=0, eval_every=2,
        best_dir=str(tmp_path / "best"),
    )  # fmt: skip
    history = train_imitation(policy, windows, config, evaluate=evaluate)
    assert [h.get("eval/best_so_far", 0.0) for h in history if "eval/success_rate" in h] == [1, 1, 0, 0]
    best = Policy.from_pretrained(tmp_path / "best")
    for name, value in best.state_dict().items():
        torch.testing.assert_close(value, snapshots[1][name], rtol=0, atol=0, msg=name)
    assert any(not torch.equal(snapshots[1][k], snapshots[3][k]) for k in snapshots[1])  # it moved on


def _small_diffusion(states: np.ndarray) -> DiffusionPolicy:
    torch.manual_seed(0)
    box = spaces.Box(-1, 1, (2,), np.float32)
    policy = DiffusionPolicy(DiffusionPolicyConfig(**SMALL, **SMALL_TIME), spaces.Dict({"state": box}), box)
    policy.fit_normalizers({"state": states}, target(states))
    return policy


def test_a_killed_run_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_one(tmp_path: Path) -> None:
    """Weights, EMA, optimiser, schedule, window order and noise all continue where they stopped."""
    states = np.random.default_rng(0).uniform(-1, 1, (64, 2)).astype(np.float32)
    windows = DemoWindows({"state": states}, target(states), np.arange(64), n_obs_steps=1, horizon=4)

    def evaluate(p: DiffusionPolicy) -> dict[str, float]:
        total = float(sum(v.detach().sum() for v in p.parameters()))
        return {"eval/success_rate": 0.0, "eval/return_mean": total}

    def config(**kwargs: object) -> ImitationConfig:
        return ImitationConfig(steps=9, batch_size=16, learning_rate=3e-3, warmup_steps=2, log_every=1,
                               eval_every=4, **kwargs)  # type: ignore[arg-type]  # fmt: skip

    straight = _small_diffusion(states)
    expected = train_imitation(straight, windows, config(), evaluate=evaluate)

    def kill_at_step_7(step: int, metrics: dict[str, float]) -> None:
        if step == 7:
            raise KeyboardInterrupt

    ckpt = str(tmp_path / "ckpt")
    with pytest.raises(KeyboardInterrupt):
        train_imitation(_small_diffusion(states), windows, config(checkpoint_dir=ckpt, checkpoint_every=3),
                        evaluate=evaluate, callback=kill_at_step_7)  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "ckpt" / "checkpoints").iterdir()) == [
        "latest", "step_0000000003", "step_0000000006",
    ]  # fmt: skip
    resumed = _small_diffusion(states)  # a new process: fresh weights, the global RNG elsewhere
    torch.manual_seed(123)
    resuming = config(checkpoint_dir=ckpt, checkpoint_every=3)
    history = train_imitation(resumed, windows, resuming, evaluate=evaluate)
    for name, value in straight.state_dict().items():  # the EMA copy and its step count included
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=0, atol=0, msg=name)
    drop = ("time/elapsed_s",)
    assert [{k: v for k, v in h.items() if k not in drop} for h in history] == [
        {k: v for k, v in h.items() if k not in drop} for h in expected
    ]
    assert [h["step"] for h in history] == list(map(float, range(1, 10)))
    done = train_imitation(_small_diffusion(states), windows, config(checkpoint_dir=ckpt), evaluate=evaluate)
    assert done == history  # finished: nothing retrained, the metrics returned
    with pytest.raises(ValueError, match="another imitation run"):
        train_imitation(_small_diffusion(states), windows, config(checkpoint_dir=ckpt, seed=1))


def test_bc_command_trains_on_a_collected_dataset_and_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``omnigym bc`` end to end: PushT expert episodes -> a saved flow policy with the data's ranges."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    argv = [
        "collect",
        "--policy",
        "pusht_expert",
        "--env",
        "omnigym/PushT-v0",
        "--dataset-id",
        "omnigym/t-v0",
    ]
    assert main([*argv, "--episodes", "2"]) == 0
    out = tmp_path / "policy"
    tiny = ["down_dims=[16,32]", "state_hidden_sizes=[32]", "num_inference_steps=2"]
    argv = ["bc", "--dataset", "omnigym/t-v0", "--policy", "flow", "--out", str(out), "--steps", "3"]
    assert main([*argv, "--eval-episodes", "1", *tiny]) == 0
    policy = Policy.from_pretrained(out)
    assert isinstance(policy, FlowPolicy) and policy.config.num_inference_steps == 2
    steps = load_dataset_steps("omnigym/t-v0")
    np.testing.assert_allclose(policy.action_normalizer.low.numpy(), steps.actions.min(axis=0), rtol=1e-6)
    np.testing.assert_allclose(
        policy.state_normalizer.high.numpy(), steps.obs["state"].max(axis=0), rtol=1e-6
    )
    assert int(policy.ema_step) == 3
    # The same episodes as an episode recording (collect --record) train the same way.
    recording = tmp_path / "recording"
    assert main(["datasets", "export", "omnigym/t-v0", "--out", str(recording)]) == 0
    argv = [
        "bc",
        "--dataset",
        str(recording),
        "--policy",
        "flow",
        "--out",
        str(tmp_path / "p2"),
        "--steps",
        "3",
    ]
    assert main([*argv, *tiny]) == 0
    from_recording = Policy.from_pretrained(tmp_path / "p2")
    np.testing.assert_allclose(
        from_recording.action_normalizer.low.numpy(), steps.actions.min(axis=0), rtol=1e-6
    )
    assert os.environ["MINARI_DATASETS_PATH"] == str(tmp_path / "datasets")  # restored
