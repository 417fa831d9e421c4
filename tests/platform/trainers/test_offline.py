"""Offline and off-policy trainers: learning from a dataset, exact resume, offline-to-online warm starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from omnigym.platform.checkpoint import latest_checkpoint
from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers import build_trainer
from omnigym.platform.trainers.on_policy import load_run_config

QUIET = ["log.progress=false", "log.tensorboard=false"]
DATASET = "omnigym/reach-mixed-v0"


@pytest.fixture(scope="module")
def reach_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """td3bc_reach's dataset: 40 Reach episodes, half by the noisy expert, half random."""
    root = tmp_path_factory.mktemp("datasets")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        from omnigym.platform.cli import resolve_policy
        from omnigym.platform.datasets import PolicySource, collect_dataset

        sources = [
            PolicySource(resolve_policy(name, "omnigym/Reach-v0"), 0.5, deterministic=False)
            for name in ("reach_expert", "random")
        ]
        summary = collect_dataset(sources, "omnigym/Reach-v0", DATASET, episodes=40, seed=0)
    assert summary.success_rate == pytest.approx(0.55, abs=0.1)  # the random half never succeeds
    return root


@pytest.fixture
def datasets(reach_dataset: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(reach_dataset))
    return reach_dataset


def run(experiment: str, run_dir: Path, *overrides: str):
    config = load_experiment(experiment, [*QUIET, f"run_dir={run_dir}", *overrides])
    return build_trainer(config, run_dir)


def test_td3bc_learns_to_reach_from_mixed_data(datasets: Path, tmp_path: Path) -> None:
    result = run(
        "td3bc_reach", tmp_path, "total_steps=1500", "eval.every_steps=0", "eval.episodes=20"
    ).train()
    # The data succeed 55% of the time; BC of the mixture would copy the random half's failures.
    assert result.final_eval["success_rate"] >= 0.6, result.final_eval
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == 1500 and lines[-1]["train/lambda"] > 0


REACH_SMALL = ["algo.gamma=0.95", "eval.every_steps=0", "eval.episodes=20"]
"""The mixed-Reach runs below: td3bc_reach's discount, one final evaluation on 20 episodes."""


@pytest.fixture(scope="module")
def reach_baselines(reach_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Final evaluations of a uniformly random policy and of BC on the mixed data (same 20 seeds)."""
    from omnigym.platform.cli import resolve_policy
    from omnigym.platform.evaluate import evaluate_policy

    random = evaluate_policy(
        resolve_policy("random", "omnigym/Reach-v0"), "omnigym/Reach-v0", episodes=20,
        seed=1_000_000, deterministic=False,
    ).summary()  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(reach_dataset))
        run_dir = tmp_path_factory.mktemp("bc")
        bc = (
            run("td3bc_reach", run_dir, "algo=bc", "policy=iql_actor", "total_steps=1500", *REACH_SMALL)
            .train()
            .final_eval
        )
    return {"random": random, "bc": bc}


OFFLINE_ON_MIXED_REACH = {
    # CQL: small nets and a 10x actor rate (the default 3e-5, CORL's, barely moves the actor in 1,500 updates)
    "cql": ["policy=sac_actor", "algo.hidden_sizes=[64,64]", "policy.hidden_sizes=[64,64]",
            "algo.cql_alpha=5.0", "algo.actor_lr=3e-4"],
    # AWAC: Reach's rewards are small, so the advantage temperature is too (lambda 1 is BC here)
    "awac": ["policy=sac_actor", "algo.awac_lambda=0.03"],
    # FQL: small nets, its recommended Q-loss normalisation with the pessimistic min over critics
    "fql": ["policy=one_step_flow", "algo.hidden_sizes=[128,128]", "algo.flow_hidden_sizes=[128,128]",
            "policy.hidden_sizes=[128,128]", "algo.alpha=3.0", "algo.normalize_q_loss=true",
            "algo.q_agg=min"],
}  # fmt: skip


@pytest.mark.parametrize("algo", sorted(OFFLINE_ON_MIXED_REACH))
def test_offline_algorithm_beats_random_and_bc_on_mixed_reach(
    algo: str, datasets: Path, reach_baselines: dict[str, dict], tmp_path: Path
) -> None:
    """Half the data is random: BC copies it, a value-based learner should prefer the expert half."""
    result = run(
        "td3bc_reach", tmp_path, f"algo={algo}", "total_steps=1500", *REACH_SMALL,
        *OFFLINE_ON_MIXED_REACH[algo],
    ).train().final_eval  # fmt: skip
    random, bc = reach_baselines["random"], reach_baselines["bc"]
    assert random["return_mean"] < -8 and bc["return_mean"] < -6, reach_baselines  # the baselines' level
    assert result["return_mean"] >= random["return_mean"] + 5, (result, random)
    assert result["return_mean"] >= bc["return_mean"] + 3, (result, bc)
    if algo != "fql":  # FQL ends near the target (return about -4) but mostly outside the success radius
        assert result["success_rate"] > bc["success_rate"], (result, bc)


def test_offline_resume_reproduces_uninterrupted_run(datasets: Path, tmp_path: Path) -> None:
    overrides = ["total_steps=40", "eval.every_steps=20", "eval.episodes=2", "checkpoint.every_steps=20"]
    straight = run("td3bc_reach", tmp_path / "straight", *overrides)
    straight.train()

    killed = run("td3bc_reach", tmp_path / "resumed", *overrides)
    update = killed.algorithm.update

    def update_then_die(batch):
        if killed.steps == 30:
            raise KeyboardInterrupt
        return update(batch)

    killed.algorithm.update = update_then_die  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        killed.train()
    assert latest_checkpoint(tmp_path / "resumed").name == "step_0000000020"
    resumed = build_trainer(load_run_config(tmp_path / "resumed"), tmp_path / "resumed", resume=True)
    assert resumed.steps == 20
    resumed.train()
    for (name, a), b in zip(
        straight.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    for name, net in straight.algorithm.networks.items():
        for a, b in zip(
            net.state_dict().values(), resumed.algorithm.networks[name].state_dict().values(), strict=True
        ):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_offline_trainer_refuses_rollout_algorithms_and_missing_datasets(
    datasets: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="learns from rollouts"):
        run("td3bc_reach", tmp_path / "a", "algo=ppo")
    with pytest.raises(FileNotFoundError, match="no Minari dataset"):
        run("td3bc_reach", tmp_path / "b", "dataset=omnigym/nothing-here-v0")


def test_warm_start_then_wsrl_warmup_keeps_weights_and_offline_data_out(
    datasets: Path, tmp_path: Path
) -> None:
    """WSRL's process sanity check: no update during warm-up, and only online data in the buffer."""
    offline_dir = tmp_path / "offline"
    run(
        "td3bc_reach", offline_dir, "total_steps=20", "eval.episodes=1", "policy=sac_actor", "algo=cql",
        "algo.num_critics=10", "algo.hidden_sizes=[256,256]", "algo.layer_norm=true", "algo.batch_size=16",
    ).train()  # fmt: skip
    online = run(
        "td3bc_reach", tmp_path / "online", "trainer=off_policy", "policy=sac_actor", "algo=wsrl",
        f"init_from={offline_dir}", "total_steps=64", "algo.warmup_steps=64", "env.num_envs=2",
        "eval.episodes=1", "algo.batch_size=16",
    )  # fmt: skip
    loaded = {k: v.clone() for k, v in online.policy.state_dict().items()}
    q_before = [p.clone() for p in online.algorithm.networks["q"].parameters()]
    online.train()
    assert len(online.buffer) == 64  # the warm-up rollouts, none of the dataset's transitions
    for name, value in online.policy.state_dict().items():
        torch.testing.assert_close(value, loaded[name], rtol=0, atol=0, msg=name)
    for a, b in zip(q_before, online.algorithm.networks["q"].parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow  # ~30 s on 2 cores: run with scripts/test.sh -m slow
def test_sac_learns_pendulum(tmp_path: Path) -> None:
    result = run("sac_pendulum", tmp_path, "eval.every_steps=0").train()
    assert result.total_steps == 4000
    assert result.final_eval["return_mean"] >= -400, result.final_eval  # random: about -1,500
