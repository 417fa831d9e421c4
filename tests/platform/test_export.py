"""``omnigym export``: policies as ONNX / TorchScript graphs that match the torch policy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.platform import export_graphs
from omnigym.platform.cli import main
from omnigym.platform.export import ExportResult, export_policy, run_exported
from omnigym.policies.cnn import CNNPolicy, CNNPolicyConfig
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

FORMATS = ["onnx", "torchscript"]
ACTION = spaces.Box(-2.0, 2.0, (2,), np.float32)
STATE = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
OBS_MEAN, OBS_STD = np.array([5.0, -3.0, 20.0]), np.array([3.0, 0.5, 10.0])


@pytest.fixture(autouse=True)
def _one_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One torch thread (the CLI's default) and a scratch working directory."""
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def need(fmt: str) -> None:
    if fmt == "onnx":
        pytest.importorskip("onnx")
        pytest.importorskip("onnxruntime")


def fitted_mlp() -> MLPPolicy:
    """An MLP whose observation statistics are far from (0, 1), so normalising matters."""
    torch.manual_seed(0)
    policy = MLPPolicy(MLPPolicyConfig(hidden_sizes=(32, 32), normalize_obs=True), STATE, ACTION)
    data = np.random.default_rng(1).normal(OBS_MEAN, OBS_STD, size=(64, 4, 3)).astype(np.float32)
    policy.update_obs_stats({"state": torch.from_numpy(data)})
    return policy


def run(result: ExportResult, inputs: dict[str, np.ndarray]) -> np.ndarray:
    return run_exported(result.model_path, inputs, result.format)


@pytest.mark.parametrize("fmt", FORMATS)
def test_mlp_bakes_the_observation_normaliser(fmt: str, tmp_path: Path) -> None:
    need(fmt)
    policy = fitted_mlp()
    assert policy.obs_rms is not None
    assert np.abs(policy.obs_rms.mean.numpy()).max() > 10  # the fit is far from the identity
    result = export_policy(policy, tmp_path / f"mlp{'.onnx' if fmt == 'onnx' else '.pt'}", fmt)
    assert result.passed and result.max_abs_diff < 1e-4, result.summary()

    raw = np.random.default_rng(2).normal(OBS_MEAN, OBS_STD, size=(7, 3)).astype(np.float32)
    exported = run(result, {"state": raw})
    mean, std = policy.obs_rms.mean.numpy(), np.sqrt(policy.obs_rms.var.numpy() + 1e-8)
    by_hand = torch.from_numpy(np.clip((raw - mean) / std, -10, 10).astype(np.float32))
    with torch.no_grad():
        expected = policy.head(policy.trunk(by_hand))[0].numpy()  # the Gaussian's mean
        unnormalised = policy.head(policy.trunk(torch.from_numpy(raw)))[0].numpy()
    assert exported.shape == (7, 2)
    assert np.abs(exported - expected).max() < 1e-4
    assert np.abs(exported - unnormalised).max() > 1e-2  # feeding raw obs to the bare net differs

    sidecar = json.loads(result.sidecar_path.read_text())
    assert sidecar["inputs"] == [
        {"name": "state", "shape": ["batch", 3], "dtype": "float32", "obs_key": "state"}
    ]
    assert sidecar["output"] == {"name": "action", "shape": ["batch", 2], "dtype": "float32"}
    assert sidecar["action_space"]["low"] == [-2.0, -2.0] and sidecar["action_space"]["high"] == [2.0, 2.0]
    assert sidecar["policy"] == "mlp" and sidecar["omnigym_version"]
    assert sidecar["graph"]["obs_normalization"]["baked_in"] is True
    assert sidecar["verification"]["max_abs_diff"] == pytest.approx(result.max_abs_diff)


@pytest.mark.parametrize("fmt", FORMATS)
def test_cnn_on_images(fmt: str, tmp_path: Path) -> None:
    need(fmt)
    torch.manual_seed(0)
    obs = spaces.Dict(
        {"image": spaces.Box(0, 255, (20, 20, 3), np.uint8), "state": spaces.Box(-1, 1, (2,), np.float32)}
    )
    config = CNNPolicyConfig(
        channels=(4, 8),
        kernel_sizes=(4, 3),
        strides=(2, 2),
        paddings=(0, 0),
        feature_size=16,
        state_keys=("state",),
    )
    policy = CNNPolicy(config, obs, ACTION)
    result = export_policy(policy, tmp_path / "cnn.model", fmt)
    assert result.passed and result.max_abs_diff < 1e-4, result.summary()
    assert [(s.name, s.shape, s.dtype) for s in result.inputs] == [
        ("image", ("batch", 20, 20, 3), "uint8"),
        ("state", ("batch", 2), "float32"),
    ]
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, size=(3, 20, 20, 3), dtype=np.uint8)
    state = rng.uniform(-1, 1, size=(3, 2)).astype(np.float32)
    expected = policy.predict({"image": image, "state": state})
    assert np.abs(run(result, {"image": image, "state": state}) - expected).max() < 1e-4


def test_discrete_actions_are_the_most_likely_index(tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy = MLPPolicy(MLPPolicyConfig(hidden_sizes=(16,), ortho_init=False), STATE, spaces.Discrete(4))
    result = export_policy(policy, tmp_path / "d.pt", "torchscript")
    obs = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    actions = run(result, {"state": obs})
    assert result.output.dtype == "int64" and actions.shape == (50,)
    np.testing.assert_array_equal(actions, policy.predict({"state": obs}))
    assert len(set(actions.tolist())) > 1  # a constant output would hide a baked-in branch


def small_chunk_config() -> dict:
    return {
        "horizon": 8, "n_obs_steps": 2, "n_action_steps": 4, "down_dims": (16,), "n_groups": 4,
        "time_embed_dim": 16, "state_hidden_sizes": (32,), "image_widths": (8, 16), "num_keypoints": 4,
        "image_feature_dim": 16, "crop_ratio": 0.8,
    }  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS)
def test_flow_chunk_sampler_unrolled_with_noise_input(fmt: str, tmp_path: Path) -> None:
    need(fmt)
    from omnigym.policies.flow.policy import FlowPolicy, FlowPolicyConfig

    torch.manual_seed(0)
    obs = spaces.Dict(
        {"image": spaces.Box(0, 255, (16, 16, 3), np.uint8), "state": spaces.Box(-5, 5, (4,), np.float32)}
    )
    policy = FlowPolicy(FlowPolicyConfig(**small_chunk_config(), num_inference_steps=2), obs, ACTION)
    result = export_policy(policy, tmp_path / "flow.bin", fmt)
    assert result.passed and result.max_abs_diff < 1e-4, result.summary()
    assert result.output.shape == ("batch", 8, 2)
    assert [s.name for s in result.inputs] == ["state", "image", "noise"]

    arrays = export_graphs.build_graph(policy).sample_inputs(3, seed=7)
    inputs = dict(zip(["state", "image", "noise"], arrays, strict=True))
    chunk = run(result, inputs)
    assert chunk.shape == (3, 8, *ACTION.shape)  # the chunk shape: [B, horizon, *action_shape]
    assert (
        np.abs(chunk) < 2.0
    ).mean() > 0.5  # mostly inside the clamp to the bounds: the diff means something
    # the noise is an input: other noise, another chunk; the fixed noise gives deterministic acting's chunk
    other = run(result, {**inputs, "noise": -inputs["noise"]})
    assert np.abs(other - chunk).max() > 1e-3
    fixed = np.asarray(json.loads(result.sidecar_path.read_text())["graph"]["fixed_noise"], dtype=np.float32)
    history = {"state": torch.from_numpy(arrays[0]), "image": torch.from_numpy(arrays[1])}
    deterministic = policy.sample_chunks(history, deterministic=True)[0].numpy()
    exported = run(result, {**inputs, "noise": np.broadcast_to(fixed, (3, *fixed.shape)).copy()})
    assert np.abs(exported - deterministic).max() < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["meanflow", "diffusion"])
def test_meanflow_and_diffusion_chunks(name: str, tmp_path: Path) -> None:
    need("onnx")
    from omnigym.core.registry import POLICIES

    policy_cls = POLICIES.get(name)
    config = policy_cls.config_class(**small_chunk_config(), num_inference_steps=3)
    policy = policy_cls(config, STATE, ACTION)
    for fmt in FORMATS:
        result = export_policy(policy, tmp_path / f"{name}.{fmt}", fmt)
        assert result.passed and result.max_abs_diff < 1e-4, result.summary()
        assert result.output.shape == ("batch", 8, 2)


# --- the command ------------------------------------------------------------------------------------
def test_cli_exports_a_saved_policy_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need("onnx")
    fitted_mlp().save_pretrained(tmp_path / "run" / "policy")
    assert main(["export", "--policy", str(tmp_path / "run"), "--format", "onnx", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["passed"] and 0 <= summary["max_abs_diff"] < 1e-4
    assert summary["model"] == str(Path("exports") / "run.onnx")  # named after the run
    assert Path(summary["model"]).is_file() and Path(summary["sidecar"]).is_file()

    out = tmp_path / "deploy" / "actor.pt"
    assert (
        main(
            [
                "export",
                "--policy",
                str(tmp_path / "run" / "policy"),
                "--format",
                "torchscript",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    diff = float(printed.split("max abs diff ")[1].split()[0])
    assert diff < 1e-4 and "input  state: float32 [batch, 3]" in printed
    assert (tmp_path / "deploy" / "actor.pt.json").is_file()


def test_cli_fails_in_one_line_when_the_export_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fitted_mlp().save_pretrained(tmp_path / "policy")
    reference = export_graphs.FeedForwardGraph.reference
    monkeypatch.setattr(
        export_graphs.FeedForwardGraph, "reference", lambda self, p, x: reference(self, p, x) + 0.01
    )
    code = main(["export", "--policy", str(tmp_path / "policy"), "--format", "torchscript", "--atol", "1e-3"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "max abs diff 0.01 > --atol 0.001" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["--policy", "random", "--env", "Pendulum-v1"],
            "policy 'random' is not one omnigym export can trace",
        ),
        (["--policy", "vlm"], "policy 'vlm' generates text"),
        (["--policy", "tiny:qwen2"], "policy 'vlm' generates text"),
        (["--policy", "mlp"], "give --env ENV"),
    ],
)
def test_cli_refuses_in_one_line(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", *argv, "--format", "torchscript"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("omnigym export: error: ") and words in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_names_the_extra_when_onnxruntime_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)  # import fails
    assert main(["export", "--policy", "anything", "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'omnigym[deploy]'" in err and "onnxruntime" in err
