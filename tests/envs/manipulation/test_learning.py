"""PPO learns Reach from state: a CI-sized run (30k steps, about 6 s on 2 cores) that must reach
the issue's target, at least 90 % deterministic success over 50 held-out seeded episodes, from an
untrained policy that barely moves."""

from pathlib import Path

from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers.on_policy import OnPolicyTrainer

EPISODES = 50


def test_ppo_learns_reach_from_state(tmp_path: Path) -> None:
    config = load_experiment(
        "ppo_reach",
        [
            "log.progress=false",
            "log.tensorboard=false",
            f"run_dir={tmp_path}",
            "total_steps=30000",
            "eval.every_steps=0",
            f"eval.episodes={EPISODES}",
        ],
    )
    assert config.env.id == "omnigym/Reach-v0" and config.env.kwargs["obs_keys"] == ["state"]
    trainer = OnPolicyTrainer(config, tmp_path)
    untrained = evaluate_policy(
        trainer.policy,
        config.env.id,
        episodes=EPISODES,
        seed=config.eval.seed,  # the trainer's final evaluation seeds, held out from training
        env_kwargs=config.env.kwargs,
    ).summary()

    trained = trainer.train().final_eval

    assert trained["episodes"] == EPISODES
    assert untrained["success_rate"] <= 0.2, untrained
    assert trained["success_rate"] >= 0.9, (trained, untrained)
    # the return (minus the summed distance, m) improves by far more than its spread over seeds
    margin = 3 * untrained["return_std"]
    assert trained["return_mean"] > untrained["return_mean"] + margin, (trained, untrained)
