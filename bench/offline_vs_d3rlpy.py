"""omnigym offline RL vs d3rlpy: IQL, TD3+BC and CQL updates/s and normalised score on the same datasets.

Both libraries train on the same locally generated Minari datasets (``hopper-medium`` and
``halfcheetah-medium``, made by ``omnigym.platform.dataset_recipes.ensure_dataset``) with the same
settings: omnigym's ``configs/algo/{iql,td3bc}.yaml`` and ``configs/policy/{iql,td3}_actor.yaml``,
and d3rlpy configured to match them (256-256 ReLU actor and critics, twin critics, batch 256,
learning rates 3e-4, gamma 0.99, tau 0.005; IQL expectile 0.7, inverse temperature 3, weight clip
100, rewards scaled by 1000 / (max - min episode return), actor learning rate cosine-decayed over
1M updates; TD3+BC alpha 2.5, smoothing noise 0.2 clipped at 0.5, actor every 2nd update; CQL
(``--algo cql``, not in the default run) with ``configs/algo/cql.yaml`` and ``sac_actor.yaml``:
256-256 actor, 256-256-256 critics, actor learning rate 3e-5, temperature 3e-4 from 1.0, a fixed
gap weight 10 over 10 samples of each kind, no entropy in the target, rewards scaled as IQL's;
all with states standardised by the dataset's mean and std, as the omnigym YAMLs set).

d3rlpy gets the same transitions as omnigym's ``ReplayBuffer.from_minari``: every Minari episode
becomes one d3rlpy episode, a terminated one with its terminal flag, a truncated one (time limit)
with its final observation kept so that its last transition bootstraps as in omnigym.

Each run is a manual loop of ``sample a batch of 256 + one update``, in a fresh process (so no
library inherits the other's torch settings) on the CPU with the same torch thread count
(``--threads``). Updates/s covers that loop (sampling included; building, dataset conversion and
evaluation excluded). Each trained policy is then evaluated with the same
``omnigym.platform.evaluate.evaluate_policy`` on the dataset's env, same episode seeds,
deterministic actions, and the returns turned into D4RL normalised scores.

Full run: both datasets, 3 seeds, 10,000 updates, 10 evaluation episodes. 10k updates are 1% of
D4RL's 1M-update schedule, so the scores are far below published ones; they compare the two
libraries at equal updates, not either with the literature. ``--quick``: hopper only, 1 seed,
1,000 updates, 3 evaluation episodes (a few minutes).

Last line: one JSON object. ``ratio`` = omnigym updates/s / d3rlpy updates/s (means over datasets
and seeds), the smaller of the two algorithms (target >= 1.5). ``score_no_worse[algo][dataset]``:
omnigym's mean normalised score is at least d3rlpy's minus the standard error of their difference
(a plain ``>=`` with one seed).

Usage: ``omnigym bench offline_vs_d3rlpy [--quick]``, or
``python bench/offline_vs_d3rlpy.py --dataset omnigym/hopper-random-v0`` for any existing dataset.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

DURATIONS = {
    "quick": "about 2 min, quick dataset already made (beside two training jobs)",
    "full": "about 55 min",
}
"""On the 2-core CPU, one torch thread: docs/algorithms/offline.md, Figures; quick timed 2026-12-03 beside
two training jobs."""

REPO = Path(__file__).resolve().parents[1]
ALGOS = {"iql": "iql_actor", "td3bc": "td3_actor", "cql": "sac_actor"}
"""Algorithm -> its policy config in configs/policy."""
DEFAULT_ALGOS = ("iql", "td3bc")
"""What a run without ``--algo`` compares (CQL's updates are several times slower)."""
DATASETS = ("hopper-medium", "halfcheetah-medium")
BATCH_SIZE = 256
EVAL_SEED = 1000


def load_configs(algo: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The algorithm and policy YAMLs of omnigym for ``algo``, as plain dicts."""
    from omnigym.core.config import load_yaml

    return load_yaml(REPO / "configs/algo" / f"{algo}.yaml"), load_yaml(
        REPO / "configs/policy" / f"{ALGOS[algo]}.yaml"
    )


def dataset_env(dataset_id: str) -> str:
    """The env id the dataset was recorded on."""
    import minari

    spec = minari.load_dataset(dataset_id).env_spec
    if spec is None:
        raise ValueError(f"{dataset_id} records no env spec to evaluate on")
    return str(spec.id)


def evaluate(act: Any, env_id: str, episodes: int) -> dict[str, Any]:
    """Deterministic episodes with omnigym's evaluator; returns and D4RL normalised scores."""
    from omnigym.platform.evaluate import evaluate_policy
    from omnigym.platform.scores import normalized_score, reference_task

    result = evaluate_policy(act, env_id, episodes=episodes, seed=EVAL_SEED, deterministic=True)
    returns = [float(r) for r in result.returns]
    task = reference_task(env_id)
    scores = [normalized_score(task, r) for r in returns] if task else None
    return {"eval_return": float(np.mean(returns)), "score": float(np.mean(scores)) if scores else None}


def train_omnigym(algo: str, dataset_id: str, updates: int, seed: int, episodes: int) -> dict[str, Any]:
    """Train omnigym's ``algo`` on the dataset; returns updates/s and the evaluation."""
    import torch

    from omnigym.core.config import build_dataclass
    from omnigym.core.registry import ALGORITHMS, POLICIES
    from omnigym.platform.buffers import ReplayBuffer
    from omnigym.platform.seeding import seed_everything

    seed_everything(seed)
    algo_data, policy_data = load_configs(algo)
    buffer = ReplayBuffer.from_minari(dataset_id)
    obs_space, act_space = buffer.observation_space, buffer.action_space
    policy_cls, algo_cls = POLICIES.get(policy_data["type"]), ALGORITHMS.get(algo_data["type"])
    policy = policy_cls(build_dataclass(policy_cls.config_class, policy_data), obs_space, act_space)
    algorithm = algo_cls(build_dataclass(algo_cls.config_class, algo_data), policy, obs_space, act_space)
    algorithm.prepare_dataset(buffer)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for _ in range(updates):
        metrics = algorithm.update(buffer.sample(BATCH_SIZE, generator))
    seconds = time.perf_counter() - start
    policy.eval()
    return {
        "updates_per_s": updates / seconds,
        "transitions": len(buffer),
        "last_critic_loss": metrics["train/critic_loss"],
        "q_data": metrics.get("train/q_mean"),  # the last batch's, where the algorithm reports it
        **evaluate(policy, dataset_env(dataset_id), episodes),
    }


def d3rlpy_dataset(dataset_id: str) -> tuple[Any, np.ndarray, list[float]]:
    """The Minari dataset as a d3rlpy ``MDPDataset`` with omnigym's transitions.

    Returns the dataset, the observations of all transitions (for the state statistics) and the
    episode returns (for the reward scale).
    """
    import minari
    from d3rlpy.constants import ActionSpace
    from d3rlpy.dataset import MDPDataset

    obs, actions, rewards, terminals, timeouts, states, returns = [], [], [], [], [], [], []
    for episode in minari.load_dataset(dataset_id).iterate_episodes():
        steps = len(episode.rewards)
        if steps == 0:
            continue
        state = np.asarray(episode.observations["state"], dtype=np.float32).reshape(steps + 1, -1)
        action = np.asarray(episode.actions, dtype=np.float32).reshape(steps, -1)
        reward = np.asarray(episode.rewards, dtype=np.float32)
        end = np.zeros(steps + 1, dtype=np.float32)
        if bool(episode.terminations[-1]):  # d3rlpy: last transition terminal, next state unused
            obs.append(state[:steps])
            actions.append(action)
            rewards.append(reward)
            terminals.append(end[:steps].copy())
            terminals[-1][-1] = 1.0
            timeouts.append(end[:steps])
        else:  # keep the final state as an extra step so the last real transition bootstraps from it
            obs.append(state)
            actions.append(np.concatenate([action, np.zeros_like(action[:1])]))
            rewards.append(np.append(reward, np.float32(0.0)))
            terminals.append(end)
            timeouts.append(end.copy())
            timeouts[-1][-1] = 1.0
        states.append(state[:steps])
        returns.append(float(reward.sum(dtype=np.float64)))
    dataset = MDPDataset(
        observations=np.concatenate(obs),
        actions=np.concatenate(actions),
        rewards=np.concatenate(rewards),
        terminals=np.concatenate(terminals),
        timeouts=np.concatenate(timeouts),
        action_space=ActionSpace.CONTINUOUS,
        action_size=actions[0].shape[1],
    )
    return dataset, np.concatenate(states), returns


def d3rlpy_algo(algo: str, states: np.ndarray, returns: list[float]) -> Any:
    """d3rlpy's IQL / TD3+BC / CQL with the settings of omnigym's YAMLs, scalers already fitted.

    The scalers are given their statistics directly: ``build_with_dataset`` does not fit them
    (only ``fit`` does), and d3rlpy's own fitting loops over every transition in Python.
    """
    from d3rlpy.algos import CQLConfig, IQLConfig, TD3PlusBCConfig
    from d3rlpy.models import VectorEncoderFactory
    from d3rlpy.optimizers import AdamFactory, CosineAnnealingLRFactory
    from d3rlpy.preprocessing import ReturnBasedRewardScaler, StandardObservationScaler

    cfg, policy_cfg = load_configs(algo)
    actor = VectorEncoderFactory(
        hidden_units=list(policy_cfg["hidden_sizes"]), activation=policy_cfg["activation"]
    )
    critic = VectorEncoderFactory(hidden_units=list(cfg["hidden_sizes"]), activation="relu")
    assert cfg["normalize_obs"] and policy_cfg["normalize_obs"], "both YAMLs standardise states"
    common: dict[str, Any] = {
        "batch_size": cfg["batch_size"],
        "gamma": cfg["gamma"],
        "tau": cfg["tau"],
        "n_critics": cfg["num_critics"],
        "actor_learning_rate": cfg["actor_lr"],
        "critic_learning_rate": cfg["critic_lr"],
        "actor_encoder_factory": actor,
        "critic_encoder_factory": critic,
        "observation_scaler": StandardObservationScaler(mean=states.mean(0), std=states.std(0)),
    }
    # omnigym's normalize_reward: rewards x 1000 / (max - min episode return) of the dataset
    reward_scaler = (
        ReturnBasedRewardScaler(return_max=max(returns), return_min=min(returns), multiplier=1000.0)
        if cfg["normalize_reward"]
        else None
    )
    if algo == "iql":
        assert (
            cfg["normalize_reward"] and cfg["value_lr"] == cfg["critic_lr"]
        )  # d3rlpy: one optimiser for Q and V
        config: Any = IQLConfig(
            **common,
            value_encoder_factory=critic,
            expectile=cfg["expectile"],
            weight_temp=cfg["beta"],
            max_weight=cfg["max_weight"],
            reward_scaler=reward_scaler,
            actor_optim_factory=AdamFactory(
                lr_scheduler_factory=CosineAnnealingLRFactory(T_max=cfg["total_updates"])
            ),
        )
    elif algo == "cql":
        config = cql_config(CQLConfig, cfg, common, reward_scaler)
    else:
        assert not cfg["normalize_reward"]
        config = TD3PlusBCConfig(
            **common,
            alpha=cfg["alpha"],
            target_smoothing_sigma=cfg["policy_noise"],
            target_smoothing_clip=cfg["noise_clip"],
            update_actor_interval=cfg["policy_delay"],
        )
    return config.create(device="cpu:0")


def cql_config(config_class: Any, cfg: dict[str, Any], common: dict[str, Any], reward_scaler: Any) -> Any:
    """d3rlpy's CQL set as ``cql.yaml``: a fixed gap weight (no Lagrange step), no entropy in the target."""
    assert not cfg["cql_lagrange"] and not cfg["backup_entropy"] and not cfg["max_target_backup"]
    assert cfg["cql_temperature"] == 1.0 and cfg["ent_coef"] == "auto" and cfg["target_entropy"] == "auto"
    assert math.isinf(cfg["cql_clip_diff_min"]) and math.isinf(cfg["cql_clip_diff_max"])
    return config_class(
        **common,
        temp_learning_rate=cfg["alpha_lr"],
        initial_temperature=1.0,
        alpha_learning_rate=0.0,  # the gap's weight stays initial_alpha x conservative_weight
        initial_alpha=1.0,
        conservative_weight=cfg["cql_alpha"],
        n_action_samples=cfg["cql_n_actions"],
        soft_q_backup=False,
        max_q_backup=False,
        reward_scaler=reward_scaler,
    )


def train_d3rlpy(algo: str, dataset_id: str, updates: int, seed: int, episodes: int) -> dict[str, Any]:
    """Train d3rlpy's ``algo`` on the same dataset and settings; returns updates/s and the evaluation."""
    import d3rlpy

    d3rlpy.seed(seed)
    dataset, states, returns = d3rlpy_dataset(dataset_id)
    model = d3rlpy_algo(algo, states, returns)
    model.build_with_dataset(dataset)
    start = time.perf_counter()
    for _ in range(updates):
        metrics = model.update(dataset.sample_transition_batch(BATCH_SIZE))
    seconds = time.perf_counter() - start
    batch = dataset.sample_transition_batch(BATCH_SIZE)
    q_data = float(np.mean(model.predict_value(batch.observations, batch.actions)))

    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        return model.predict(np.asarray(obs["state"], dtype=np.float32))

    return {
        "updates_per_s": updates / seconds,
        "transitions": dataset.transition_count,
        "last_critic_loss": float(metrics["critic_loss"]),
        "q_data": q_data,  # mean Q of the critics on a batch of data, as omnigym's train/q_mean
        **evaluate(act, dataset_env(dataset_id), episodes),
    }


def run_worker(lib: str, algo: str, dataset_id: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One training run in a fresh interpreter; its JSON line."""
    cmd = [
        sys.executable, __file__, "--worker", lib, "--algo", algo, "--dataset", dataset_id,
        "--seed", str(seed), "--updates", str(args.updates), "--episodes", str(args.episodes),
        "--threads", str(args.threads),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{lib} {algo} on {dataset_id} (seed {seed}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (0 for one value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds of one library / algorithm / dataset."""
    ups, _ = mean_se([r["updates_per_s"] for r in runs])
    ret, ret_se = mean_se([r["eval_return"] for r in runs])
    scores = [r["score"] for r in runs if r["score"] is not None]
    score, score_se = mean_se(scores) if scores else (None, None)
    return {
        "updates_per_s": ups,
        "score": score,
        "score_se": score_se,
        "scores": [round(s, 2) for s in scores],
        "eval_return": ret,
        "eval_return_se": ret_se,
        "transitions": runs[0]["transitions"],
        "last_critic_loss": mean_se([r["last_critic_loss"] for r in runs])[
            0
        ],  # each library's own definition
    }


def resolve_datasets(names: list[str], quick: bool) -> list[str]:
    """Minari ids: ids (with a ``/``) as given, recipe names through ``ensure_dataset``."""
    ids = [n for n in names if "/" in n]
    recipes = [n for n in names if "/" not in n]
    if recipes:
        from omnigym.platform.dataset_recipes import ensure_dataset

        ids += [ensure_dataset(n, quick=quick) for n in recipes]
    return ids


def main() -> None:
    """Train every dataset x algorithm x library x seed and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="hopper only, 1 seed, 1,000 updates (a few minutes)"
    )
    parser.add_argument("--dataset", action="append", help="recipe name or Minari id (repeatable)")
    parser.add_argument(
        "--algo",
        action="append",
        choices=list(ALGOS),
        help="algorithm (repeatable; default iql and td3bc)",
    )
    parser.add_argument("--seeds", type=int, help="seeds 0..S-1 (default 3, or 1 with --quick)")
    parser.add_argument("--updates", type=int, help="updates per run (default 10,000, or 1,000 with --quick)")
    parser.add_argument("--episodes", type=int, help="evaluation episodes (default 10, or 3 with --quick)")
    parser.add_argument(
        "--threads", type=int, help="torch threads of every run (default 2, or 1 with --quick)"
    )
    parser.add_argument("--worker", choices=["omnigym", "d3rlpy"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.updates = args.updates or (1_000 if args.quick else 10_000)
    args.episodes = args.episodes or (3 if args.quick else 10)
    args.threads = args.threads or (1 if args.quick else 2)

    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        train = train_omnigym if args.worker == "omnigym" else train_d3rlpy
        result = train(args.algo[0], args.dataset[0], args.updates, args.seed, args.episodes)
        print(json.dumps({**result, "torch_threads": torch.get_num_threads()}))
        return

    datasets = resolve_datasets(
        args.dataset or (list(DATASETS[:1]) if args.quick else list(DATASETS)), args.quick
    )
    algos = args.algo or list(DEFAULT_ALGOS)
    seeds = list(range(args.seeds or (1 if args.quick else 3)))
    figures: dict[str, Any] = {
        "bench": "offline_vs_d3rlpy",
        "quick": args.quick,
        "torch_threads": args.threads,  # every worker's (each reports its own in its runs)
        "settings": {
            "updates": args.updates,
            "seeds": seeds,
            "eval_episodes": args.episodes,
            "threads": args.threads,
        },
        "datasets": datasets,
    }
    results: dict[str, dict[str, Any]] = {algo: {} for algo in algos}
    header = f"{'dataset':<32} {'algo':<6} {'library':<8} {'updates/s':>10} {'score':>16} {'return':>18}"
    print(header, flush=True)
    for dataset_id in datasets:
        for algo in algos:
            runs: dict[str, list[dict[str, Any]]] = {"omnigym": [], "d3rlpy": []}
            for seed in seeds:  # alternate libraries so load drift on the machine hits both alike
                for lib in runs:
                    runs[lib].append(run_worker(lib, algo, dataset_id, seed, args))
            summary = {lib: summarize(r) for lib, r in runs.items()}
            for lib, s in summary.items():
                score = "n/a" if s["score"] is None else f"{s['score']:.1f} +- {s['score_se']:.1f}"
                print(
                    f"{dataset_id:<32} {algo:<6} {lib:<8} {s['updates_per_s']:>10.1f} {score:>16} "
                    f"{s['eval_return']:>9.1f} +- {s['eval_return_se']:<6.1f}",
                    flush=True,
                )
            ours, theirs = summary["omnigym"], summary["d3rlpy"]
            no_worse = None
            if ours["score"] is not None and theirs["score"] is not None:
                margin = math.hypot(ours["score_se"], theirs["score_se"])
                no_worse = ours["score"] >= theirs["score"] - margin
            results[algo][dataset_id] = {
                **summary,
                "updates_ratio": ours["updates_per_s"] / theirs["updates_per_s"],
                "score_no_worse": no_worse,
                "runs": runs,
            }
    ratios = {}
    for algo, per_dataset in results.items():
        ours_ups = [r["updates_per_s"] for d in per_dataset.values() for r in d["runs"]["omnigym"]]
        their_ups = [r["updates_per_s"] for d in per_dataset.values() for r in d["runs"]["d3rlpy"]]
        ratios[algo] = (sum(ours_ups) / len(ours_ups)) / (sum(their_ups) / len(their_ups))
    for algo, ratio in ratios.items():
        print(f"{algo}: omnigym / d3rlpy updates/s = x{ratio:.2f}", flush=True)
    figures["updates_ratio"] = ratios
    figures["score_no_worse"] = {
        algo: {d: r["score_no_worse"] for d, r in per.items()} for algo, per in results.items()
    }
    figures["results"] = results
    figures["ratio"] = min(ratios.values())
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
