"""Diffusion Policy vs one-step MeanFlow, cloned from scripted experts on both PushTs, scored as LeRobot does.

For each env of ``--envs`` (``pusht``: omnigym's MuJoCo ``omnigym/PushT-v0``; ``gym_pusht``:
LeRobot's pymunk ``omnigym/GymPushT-v0``, the env LeRobot's and the Diffusion Policy paper's
figures are on) and the observations of ``--obs``:

1. Demonstrations: the env's scripted expert (``pusht_expert``, ``gym_pusht_expert``;
   deterministic) from seeds 0, 1, ..., written as a Minari dataset with
   :func:`~omnigym.platform.datasets.collect_dataset` (in a temporary ``$MINARI_DATASETS_PATH``).
2. Behaviour cloning of ``diffusion`` (DDPM, 10-step DDIM sampling) and ``meanflow`` (one network
   call per chunk) with :func:`~omnigym.platform.trainers.imitation.imitate_dataset`: same U-Net,
   data, optimiser and steps. Every quarter of training (and at the end) the policy plays
   ``PROGRESS_EPISODES`` validation episodes (seeds from ``VALIDATION_SEED``); the best of those
   checkpoints is kept beside the final one.
3. The protocol of LeRobot's PushT evaluation: ``--test-episodes`` episodes (500 in a full run)
   from ``EVAL_SEED``, deterministic acting; per episode the maximum coverage of the target over
   its steps, success when it reaches 0.95 (the env then ends the episode). Reported for the
   final and the best checkpoint: success rate and mean maximum coverage. LeRobot's Diffusion
   Policy on gym-pusht (images and the agent's position, 206 human demonstrations, about 7 GPU
   hours) scores 63.8 % success and 0.959 mean maximum coverage over 500 episodes (its model card).
4. The latency of one action chunk at batch 1 on one CPU thread (median of ``LATENCY_CALLS``
   calls after warm-up, the two policies taking turns), on the first env's policies.

``--obs image`` clones from ``omnigym/GymPushTPixels-v0`` (96x96 images and the agent's position,
LeRobot's observations; gym_pusht only: omnigym's MuJoCo pixel env also carries the full state).
``--obs keypoints`` clones from ``omnigym/GymPushTKeypoints-v0`` (the T's 8 corners and the
agent's position: the Diffusion Policy paper's low-dimensional PushT; gym_pusht only).

Last line: one JSON object; ``ratio`` = diffusion's chunk latency / MeanFlow's, ``figures`` per
env, and the success rates and coverages of each policy and checkpoint.

Usage: ``omnigym bench pusht_bc [--quick] [--envs pusht,gym_pusht] [--obs state|image|keypoints]
[--test-episodes N] [--jobs N] [--out DIR]``. Full: 1,000 demonstrations, 12,000 BC steps of 128 windows
per policy, 500 test episodes per checkpoint; quick: 20 demonstrations, 300 steps of 32, 10
test episodes. Both use a CPU-sized U-Net (``CPU_NET``, 1.6 M parameters; the configs' is 6.3 M);
``--obs image`` also halves the image encoder's widths (``CPU_IMAGE_NET``).
``--jobs 2`` (the default of a full run on a CPU) trains two policies (and then scores two
checkpoints) at once, each in its own one-thread process. ``--out DIR`` keeps everything in
``DIR`` and resumes from it: the same command run again skips the finished stages (the
demonstrations, each policy's training, each checkpoint's scores) and continues a training from
its last checkpoint (every 500 steps), so a run of several hours can be done in parts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from omnigym.core.policy import Policy
from omnigym.platform.runtime.processes import map_in_processes

DURATIONS = {
    "quick": "about 8 min (both envs, beside two other jobs)",
    "full": "hours: state on both envs about 4 h of BC and 1 h of scoring beside other jobs, run in "
    "parts with --out DIR; the image run many more (docs/policies.md)",
}
"""Full run on a 2-core CPU: docs/policies.md and README.md."""

ENVS = {
    "pusht": {"state": "omnigym/PushT-v0", "expert": "pusht_expert"},
    "gym_pusht": {
        "state": "omnigym/GymPushT-v0",
        "image": "omnigym/GymPushTPixels-v0",
        "keypoints": "omnigym/GymPushTKeypoints-v0",
        "expert": "gym_pusht_expert",
    },
}
"""The PushTs: the env id of each observation kind, and the scripted expert."""
LEROBOT = {"success": 0.638, "max_coverage": 0.959, "episodes": 500, "observations": "image"}
"""LeRobot's Diffusion Policy on gym-pusht (model card ``lerobot/diffusion_pusht``)."""
EVAL_SEED = 10_000
"""First test episode's seed (the demonstrations use seeds 0, 1, ...)."""
VALIDATION_SEED = 20_000
"""First seed of the progress evaluations that choose the best checkpoint (not the test seeds)."""
POLICIES = ("diffusion", "meanflow")
LEARNING_RATE = 1e-3
"""Peak AdamW rate (cosine decay to 0): Diffusion Policy's 1e-4 needs far more steps than a CPU
run affords; not tuned further. Most of the success comes in the last quarter of the decay
(diffusion's 20-episode progress evaluations in a trial: 0.00, 0.25, 0.30, 0.90)."""
LATENCY_WARMUP, LATENCY_CALLS, LATENCY_ROUNDS = 5, 100, 5
PROGRESS_EPISODES = 50
"""Validation episodes of each progress evaluation of a full run (quick: ``QUICK_PROGRESS``)."""
QUICK_PROGRESS = 4
CPU_NET = ["down_dims=[32,64,128]", "state_hidden_sizes=[128,128]", "time_embed_dim=64"]
"""Policy overrides of both runs: 1.6 M parameters instead of the configs' 6.3 M (a third of
the training time on a CPU)."""
CPU_IMAGE_NET = ["image_widths=[16,32,64]"]
"""Added with ``--obs image``: half the image encoder's widths. One training step of 128 windows
on one thread of this project's CPU: 0.73 s for diffusion and 1.13 s for MeanFlow, against 1.81 s
for diffusion with the configs' widths [32, 64, 128] (about 6 h for 12,000 steps)."""


def policy_overrides(obs: str) -> list[str]:
    """The policy config overrides of a run on ``obs`` observations."""
    return [*CPU_NET, *(CPU_IMAGE_NET if obs == "image" else [])]


def dataset_id(env: str, obs: str) -> str:
    """The demonstrations of ``env`` with ``obs`` observations."""
    return f"omnigym/{env.replace('_', '')}-{obs}-expert-v0"


def expert_policy(env_id: str, name: str) -> Any:
    """A registered scripted expert, built for ``env_id`` with the env options it asks for."""
    from omnigym.core.registry import POLICIES as REGISTRY
    from omnigym.platform.vec_env import make_env

    cls = REGISTRY.get(name)
    env = make_env(env_id, **cls.env_kwargs)
    policy = cls(cls.config_class(), env.observation_space, env.action_space)
    env.close()
    return policy


def evaluate(policy: Any, env_id: str, episodes: int) -> dict[str, float]:
    """LeRobot's PushT figures of deterministic episodes from ``EVAL_SEED``.

    Success rate (the episode's maximum coverage reached 0.95), mean maximum coverage, mean final
    coverage and mean length.
    """
    from omnigym.platform.evaluate import evaluate_policy

    env_kwargs = dict(getattr(policy, "env_kwargs", {}))
    summary = evaluate_policy(
        policy, env_id, episodes=episodes, seed=EVAL_SEED, num_envs=min(episodes, 10), env_kwargs=env_kwargs
    ).summary()
    return {
        "success": round(summary.get("success_rate", 0.0), 4),
        "max_coverage": round(summary.get("max_coverage_mean", float("nan")), 4),
        "final_coverage": round(summary.get("coverage_mean", float("nan")), 4),
        "length": round(summary["length_mean"], 1),
    }


def chunk_latencies_ms(policies: dict[str, Any], history: dict[str, torch.Tensor]) -> dict[str, float]:
    """Median wall time of one deterministic chunk at batch 1 on one thread, per policy (ms).

    The policies take turns over ``LATENCY_ROUNDS`` rounds, so a change in the machine's load
    (other processes, env workers shutting down) weighs on both alike rather than on one.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {name: [] for name in policies}
    try:
        for policy in policies.values():
            policy.eval()
            for _ in range(LATENCY_WARMUP):
                policy.sample_chunks(history, deterministic=True)
        for _ in range(LATENCY_ROUNDS):
            for name, policy in policies.items():
                for _ in range(LATENCY_CALLS // LATENCY_ROUNDS):
                    tic = time.perf_counter()
                    policy.sample_chunks(history, deterministic=True)
                    times[name].append(time.perf_counter() - tic)
    finally:
        torch.set_num_threads(threads)
    return {name: 1000 * statistics.median(values) for name, values in times.items()}


def first_history(dataset: str, keys: tuple[str, ...], n_obs_steps: int) -> dict[str, torch.Tensor]:
    """The first demonstration's first observation, repeated as a ``[1, To, ...]`` history."""
    from omnigym.platform.datasets import load_dataset_steps

    obs = load_dataset_steps(dataset).obs
    history = {}
    for key in keys:
        first = torch.as_tensor(obs[key][:1])
        history[key] = first.unsqueeze(1).expand(1, n_obs_steps, *first.shape[1:]).contiguous()
    return history


def train_policy(
    name: str, dataset: str, overrides: list[str], imitation: dict[str, Any], out: str, device: str
) -> dict[str, Any]:
    """Clone ``name`` (``overrides`` on its config) from ``dataset`` to ``out``.

    The best progress evaluation's policy goes to ``out-best``, the training checkpoints to
    ``out-train`` (a killed run resumes from them) and the training figures to ``out-training.json``, which
    a rerun on the same folder returns without training. Runs in the bench's process or in a
    worker process (``--jobs``), hence plain arguments.
    """
    from omnigym.platform.trainers.imitation import ImitationConfig, imitate_dataset

    done = Path(f"{out}-training.json")
    if done.is_file():
        return dict(json.loads(done.read_text()))
    if imitation["log_every"]:  # hours of training: show the imitation log and progress evaluations
        logging.basicConfig(level=logging.INFO, format=f"[{name} {dataset}] %(message)s", force=True)
    config = ImitationConfig(**imitation, best_dir=f"{out}-best", checkpoint_dir=f"{out}-train")
    policy, history = imitate_dataset(dataset, name, list(overrides), config, device=device)
    policy.to("cpu").save_pretrained(out)
    progress = [
        {"step": int(h["step"]), "success": round(h["eval/success_rate"], 3)}
        for h in history
        if "eval/success_rate" in h
    ]
    best = next(h for h in reversed(history) if h.get("eval/best_so_far"))
    stats = {
        "train_s": round(history[-1]["time/elapsed_s"], 1),  # summed over resumed parts
        "final_loss": {k: round(v, 4) for k, v in history[-1].items() if k.startswith("train/loss")},
        "parameters": sum(p.numel() for p in policy.model.parameters()),
        "validation": progress,
        "best_step": int(best["step"]),
    }
    write_json(done, stats)
    return stats


def score_checkpoint(path: str, env_id: str, episodes: int) -> dict[str, Any]:
    """:func:`evaluate` of the policy saved at ``path``, kept in ``path-scores.json`` (a rerun reads it)."""
    done = Path(f"{path}-scores.json")
    if done.is_file():
        return dict(json.loads(done.read_text()))
    tic = time.perf_counter()
    row = {
        **evaluate(Policy.from_pretrained(path), env_id, episodes),
        "eval_s": round(time.perf_counter() - tic, 1),
    }
    write_json(done, row)
    return row


def demonstrations(env: str, obs: str, episodes: int, test_episodes: int, root: Path) -> dict[str, Any]:
    """Collect ``env``'s expert demonstrations and score the expert on the test seeds (kept in ``root``)."""
    import minari

    from omnigym.platform.datasets import collect_dataset

    done = root / f"{env}-demonstrations.json"
    if done.is_file():
        return dict(json.loads(done.read_text()))
    env_id, expert, dataset = ENVS[env][obs], ENVS[env]["expert"], dataset_id(env, obs)
    if dataset in minari.list_local_datasets():  # a run killed while collecting
        minari.delete_dataset(dataset)
    tic = time.perf_counter()
    summary = collect_dataset(expert_policy(env_id, expert), env_id, dataset, episodes=episodes, seed=0)
    row = evaluate(expert_policy(env_id, expert), env_id, test_episodes)
    figures = {
        "env_id": env_id,
        "demo_steps": summary.steps,
        "demo_success": summary.success_rate,
        expert: row,
    }
    print(
        f"{env}: {episodes} demonstrations by {expert} ({summary.steps} steps, success "
        f"{summary.success_rate}); the expert on the test seeds: success {row['success']:.3f}, "
        f"max coverage {row['max_coverage']:.3f} ({time.perf_counter() - tic:.0f} s)"
    )
    write_json(done, figures)
    return figures


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` to ``path`` whole or not at all (a killed run leaves no half file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)


def open_out(out: str, settings: dict[str, Any]) -> Path:
    """The run folder: new, or one of an earlier run with the same settings (resumed).

    Raises:
        SystemExit: the folder holds something else (one line saying what to do).
    """
    root = Path(out)
    record = root / "settings.json"
    if record.is_file():
        earlier = json.loads(record.read_text())
        if earlier != settings:
            changed = sorted(k for k in settings.keys() | earlier.keys() if settings.get(k) != earlier.get(k))
            raise SystemExit(
                f"pusht_bc: {root} holds a run with other settings ({', '.join(changed)}); "
                "give another --out, or the same options to resume it"
            )
        print(f"pusht_bc: resuming the run in {root} (finished stages are read back)")
    elif root.exists() and any(root.iterdir()):
        raise SystemExit(f"pusht_bc: {root} exists and is not a pusht_bc run folder; give another --out")
    else:
        root.mkdir(parents=True, exist_ok=True)
        write_json(record, settings)
    return root


def main() -> None:
    """Demonstrate, clone both policies on each env, evaluate and time them; the last line is JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="20 demonstrations, 300 BC steps, 10 test episodes"
    )
    parser.add_argument("--envs", default="pusht,gym_pusht", help="comma-separated: pusht, gym_pusht")
    parser.add_argument("--obs", choices=("state", "image", "keypoints"), default="state")
    parser.add_argument("--test-episodes", type=int, default=0, help="per checkpoint (0: 500, quick 10)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--threads", type=int, default=0,
        help="torch CPU threads per training process (0: 1 with --quick or --jobs 2, else torch's default)",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=0,
        help="policies trained (and checkpoints scored) at once, each in its own process "
        "(0: 2 for a full run on a CPU, else 1)",
    )  # fmt: skip
    parser.add_argument(
        "--out", default="",
        help="keep the demonstrations, training checkpoints, policies and scores here; rerun with the "
        "same options to resume a killed run where it stopped (default: a temporary folder)",
    )  # fmt: skip
    args = parser.parse_args()
    envs = [name.strip() for name in args.envs.split(",") if name.strip()]
    unknown = [name for name in envs if name not in ENVS]
    if unknown or not envs:
        parser.error(f"--envs takes {', '.join(ENVS)}; got {args.envs!r}")
    without = [name for name in envs if args.obs not in ENVS[name]]
    if without:
        why = {
            "image": "omnigym/PushTPixels-v0 also carries the full state",
            "keypoints": "omnigym/PushT-v0's state already holds the block's pose",
        }[args.obs]
        parser.error(
            f"--obs {args.obs} runs on {', '.join(n for n in ENVS if args.obs in ENVS[n])} only "
            f"({why}); drop {', '.join(without)} from --envs"
        )
    jobs = args.jobs or (2 if args.device == "cpu" and not args.quick else 1)
    if jobs < 1:
        parser.error("--jobs must be >= 1")
    threads = args.threads or (1 if jobs > 1 or args.quick else 0)
    if threads:  # also for the evaluations: closed-loop PushT outcomes change with the thread count
        torch.set_num_threads(threads)
    if args.quick:
        episodes, bc_steps, batch_size, test_episodes, progress = 20, 300, 32, 10, QUICK_PROGRESS
    else:
        episodes, bc_steps, batch_size, test_episodes, progress = 1000, 12_000, 128, 500, PROGRESS_EPISODES
    test_episodes = args.test_episodes or test_episodes
    imitation = {
        "steps": bc_steps, "batch_size": batch_size, "learning_rate": LEARNING_RATE, "warmup_steps": 500,
        "log_every": 0 if args.quick else 1000, "seed": 0, "eval_every": bc_steps // 4,
        "eval_episodes": progress, "eval_seed": VALIDATION_SEED,
    }  # fmt: skip
    overrides = policy_overrides(args.obs)
    settings = {
        "envs": envs, "obs": args.obs, "demo_episodes": episodes, "imitation": imitation,
        "policy_overrides": overrides, "test_episodes": test_episodes, "threads": threads,
        "device": args.device,
    }  # fmt: skip
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = open_out(args.out, settings) if args.out else Path(tmp)
        os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
        figures = {env: demonstrations(env, args.obs, episodes, test_episodes, root) for env in envs}
        tic = time.perf_counter()
        pairs = [(env, name) for env in envs for name in POLICIES]
        outs = [str(root / f"{env}-{name}") for env, name in pairs]
        work = [
            (name, dataset_id(env, args.obs), overrides, imitation, out, args.device)
            for (env, name), out in zip(pairs, outs, strict=True)
        ]
        trained = map_in_processes(train_policy, work, jobs, threads or 1)
        training_wall_s = time.perf_counter() - tic
        first = {name: Policy.from_pretrained(root / f"{envs[0]}-{name}") for name in POLICIES}
        keys = (*first[POLICIES[0]].state_keys, *first[POLICIES[0]].image_keys)
        history = first_history(dataset_id(envs[0], args.obs), keys, first[POLICIES[0]].config.n_obs_steps)
        latencies = chunk_latencies_ms(first, history)  # before the evaluations: their workers add load
        scoring = [
            (path, figures[env]["env_id"], test_episodes)
            for (env, _), out in zip(pairs, outs, strict=True)
            for path in (out, f"{out}-best")
        ]
        print(f"scoring {len(scoring)} checkpoints on {test_episodes} test episodes each ({jobs} at a time)")
        scores = map_in_processes(score_checkpoint, scoring, jobs, threads or 1)
        for index, ((env, name), stats) in enumerate(zip(pairs, trained, strict=True)):
            final, best = scores[2 * index], scores[2 * index + 1]
            figures[env][name] = {
                "final": final,
                "best": best,
                "latency_ms": round(latencies[name], 2),
                **stats,
            }
            print(
                f"{env} {name}: final success {final['success']:.3f} (max coverage "
                f"{final['max_coverage']:.3f}); best (step {stats['best_step']}) success "
                f"{best['success']:.3f} ({best['max_coverage']:.3f}); BC {stats['train_s']:.0f} s, "
                f"validation {stats['validation']}"
            )
    dp, mf = (figures[envs[0]][name] for name in POLICIES)
    ratio = dp["latency_ms"] / mf["latency_ms"] if mf["latency_ms"] else float("inf")
    print(
        f"chunk latency: diffusion {dp['latency_ms']:.1f} ms, meanflow {mf['latency_ms']:.1f} ms "
        f"({ratio:.1f}x lower)"
    )
    headline = {
        f"{env}_{name}_{checkpoint}_{metric}": figures[env][name][checkpoint][metric]
        for env in envs
        for name in POLICIES
        for checkpoint in ("final", "best")
        for metric in ("success", "max_coverage")
    }
    print(json.dumps({
        "bench": "pusht_bc",
        "ratio": ratio,
        **headline,
        "diffusion_latency_ms": dp["latency_ms"], "meanflow_latency_ms": mf["latency_ms"],
        "lerobot_diffusion_gym_pusht": LEROBOT,
        "figures": figures, "envs": envs, "obs": args.obs, "demo_episodes": episodes,
        "bc_steps": bc_steps, "batch_size": batch_size, "learning_rate": LEARNING_RATE,
        "policy_overrides": overrides, "test_episodes": test_episodes, "progress_episodes": progress,
        "jobs": jobs, "training_wall_s": round(training_wall_s, 1), "out": args.out or None,
        "device": args.device, "threads": threads or torch.get_num_threads(),
        "torch_threads": threads or torch.get_num_threads(), "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
