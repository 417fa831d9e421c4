"""A tiny VLM learns to drive from its bird's-eye view and scene text: SFT on PDM-Closed, then GRPO.

The recipe a user follows with a real model (docs/evaluation.md, "A VLM that drives"), on a
~1 M-parameter random SmolVLM (Idefics3) built offline, on ``omnigym/DrivingVLM-v0`` with text
actions (64 px raster, scene text, NAVSIM-style PDM score):

1. **Demonstrations**: ``pdm_closed_meta`` (PDM-Closed's plan written as the nearest meta action,
   e.g. ``keep lane, decelerate``; the env's reference controller turns a meta action back into a
   plan) drives ``DEMO_EPISODES`` training-split scenes, recorded as a Minari dataset of what the
   learner sees (image and scene text). Meta actions, not 8 written poses: a plan is ~100 tokens
   to generate per step, which a CPU run cannot afford for every GRPO sample; the plan form is
   the same env and the same SFT path.
2. **SFT** (``omnigym vlm sft``): a short fine-tuning on PDM-Closed's answers, the rarer answers
   repeated (:data:`MAX_REPEAT`) so that the model learns when to slow down, not only the
   commonest answer.
3. **GRPO** (``omnigym train grpo_vlm_driving policy.model=<sft>/hf``): groups of 8 episodes from
   one scene, the per-step PDMS share as the reward, k3 KL to the SFT model.

PDMS is measured on ``EVAL['episodes']`` held-out ``test`` scenes (log-replay traffic, whole
scenes, greedy replies) for the untrained model, after SFT, after GRPO, and for the reference
rows: ``constant_velocity`` (NAVSIM's floor), ``pdm_closed`` (the rule-based planner, writing
plans) and ``pdm_closed_meta`` (the teacher: what imitating it perfectly earns).

Last line: one JSON object; ``ratio`` = PDMS after GRPO / PDMS of ``constant_velocity`` (the
issue's target: >= 1.3 on the quick run, with PDMS after GRPO above PDMS after SFT).

Measured (``--quick``, docs/evaluation.md): PDMS untrained 0.766 (every reply invalid: the env's
``keep lane, keep speed`` fallback), after SFT 0.850, after GRPO 0.861; ``constant_velocity``
0.445 (``ratio`` 1.93), ``pdm_closed_meta`` 0.855, ``pdm_closed`` 0.961. One seed: GRPO's +0.011
is within what one of the 30 scenes can move.

Usage: ``omnigym bench vlm_driving [--quick] [--threads N] [--keep DIR]`` (quick: 4,096 GRPO env
steps; full: 12,288).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DURATIONS = {"quick": "about 12 min", "full": "not recorded"}
"""On the 2-core machine: docs/evaluation.md, "A tiny VLM that drives"; no full run time recorded."""

ENV_ID = "omnigym/DrivingVLM-v0"
ENV_KWARGS = {"action_space": "text", "image_size": 64}
DATASET_ID = "driving/pdm-closed-meta-text-v0"
EVAL = {"episodes": 30, "seed": 0, "num_envs": 10}
DEMO_EPISODES = 60
SFT = {"steps": 200, "batch_size": 32, "learning_rate": 1e-3, "log_every": 50}
MAX_REPEAT = 4
"""SFT rebalancing: each answer's demonstrations are repeated up to this many times, towards half
the commonest answer's count (``keep lane, keep speed`` is 79 % of the teacher's steps; without
rebalancing the model learns to write only that, PDMS 0.761 against 0.850 with it)."""
SYSTEM_PROMPT = "You drive a car. Answer with a meta action inside <answer></answer>."
"""A short system prompt: the default one (every form of both action kinds) is 272 tokens of
the tiny model's tokenizer, more than the scene text, and every prompt is padded to the longest."""
POLICY = {
    "max_new_tokens": 24, "max_prompt_tokens": 416, "eval_micro_batch_size": 16,
    "system_prompt": SYSTEM_PROMPT,
}  # fmt: skip


def driving_scores(policy: Any) -> dict[str, float]:
    """Greedy PDMS (and EPDMS, invalid-reply rate) on the held-out test scenes."""
    from omnigym.platform.evaluate import evaluate_policy

    kwargs = {**ENV_KWARGS, "split": "test", **getattr(policy, "env_kwargs", {})}
    result = evaluate_policy(policy, ENV_ID, env_kwargs=kwargs, **EVAL)  # type: ignore[arg-type]
    summary = result.summary()
    steps = max(float(sum(result.lengths)), 1.0)
    invalid = float(sum(result.metrics.get("invalid_actions", [0.0])))
    return {
        "pdms": round(float(summary["pdms_mean"]), 4),
        "epdms": round(float(summary["epdms_mean"]), 4),
        "invalid": round(invalid / steps, 4),
    }


def reference(name: str) -> dict[str, float]:
    """A registered driving baseline's scores."""
    from omnigym.platform.agent_eval import registered_agent

    return driving_scores(registered_agent(name, ENV_ID, {**ENV_KWARGS, "split": "test"}))


def demonstrations() -> dict[str, Any]:
    """The teacher's episodes on training scenes as a Minari dataset; its size and answer counts."""
    from collections import Counter

    from omnigym.platform.agent_eval import registered_agent
    from omnigym.platform.datasets import collect_dataset, load_dataset_steps

    teacher = registered_agent("pdm_closed_meta", ENV_ID, {**ENV_KWARGS, "split": "train"})
    summary = collect_dataset(
        teacher, ENV_ID, DATASET_ID, episodes=DEMO_EPISODES, env_kwargs={**ENV_KWARGS, "split": "train"}
    )
    answers = Counter(str(a) for a in load_dataset_steps(DATASET_ID).actions)
    return {"episodes": summary.episodes, "steps": summary.steps, "answers": dict(answers.most_common())}


def rebalanced_rows(answers: list[str], max_repeat: int = MAX_REPEAT) -> np.ndarray:
    """Row indices, each answer's rows repeated round(commonest / count / 2) times (1 to max_repeat)."""
    labels, counts = np.unique(np.asarray(answers), return_counts=True)
    rows = []
    for label, count in zip(labels, counts, strict=True):
        repeat = int(min(max_repeat, max(1, round(counts.max() / count / 2))))
        rows.append(np.tile(np.flatnonzero(np.asarray(answers) == label), repeat))
    return np.concatenate(rows)


def supervised(model: Path, out: Path) -> tuple[dict[str, float], dict[str, float]]:
    """SFT on the demonstrations (saved to ``out``); scores of the untrained and the SFT model."""
    import minari
    import torch

    from omnigym.platform.datasets import load_dataset_steps
    from omnigym.platform.trainers.vlm_sft import SFTConfig, answer_targets, supervised_finetune
    from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig

    dataset = minari.load_dataset(DATASET_ID)
    torch.manual_seed(0)
    config = VLMPolicyConfig(model=str(model), **POLICY)  # type: ignore[arg-type]
    policy = VLMPolicy(config, dataset.observation_space, dataset.action_space)
    untrained = driving_scores(policy)
    print(f"untrained: {untrained}", flush=True)
    steps = load_dataset_steps(DATASET_ID)

    def log(step: int, metrics: dict[str, float]) -> None:
        print(f"sft step {step}: nll {metrics['train/sft_nll']:.3f}", flush=True)

    answers = [str(action) for action in steps.actions]
    rows = rebalanced_rows(answers)
    obs = {
        key: [steps.obs[key][i] for i in rows] if key == "text" else steps.obs[key][rows]
        for key in config.obs_keys
    }
    targets = answer_targets([answers[i] for i in rows])
    supervised_finetune(policy, obs, targets, SFTConfig(**SFT), callback=log)  # type: ignore[arg-type]
    policy.save_pretrained(out)
    sft = driving_scores(policy)
    print(f"after sft: {sft}", flush=True)
    return untrained, sft


def reinforce(start: Path, total_steps: int, run_dir: Path, threads: int) -> Path:
    """GRPO from the SFT model (``start/hf``) on ``threads`` torch threads; the final policy's directory."""
    from omnigym.platform.checkpoint import latest_checkpoint, load_checkpoint
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers.on_policy import OnPolicyTrainer

    overrides = [
        f"policy.model={start / 'hf'}",
        f"policy.max_new_tokens={POLICY['max_new_tokens']}",
        f"policy.max_prompt_tokens={POLICY['max_prompt_tokens']}",
        f"policy.system_prompt={SYSTEM_PROMPT}",
        f"env.kwargs.image_size={ENV_KWARGS['image_size']}",
        f"total_steps={total_steps}",
        f"eval.every_steps={total_steps}",
        "eval.episodes=8",
        "log.progress=false",
        "log.tensorboard=false",
        f"runtime.torch_threads={threads}",
        f"run_dir={run_dir}",
    ]
    OnPolicyTrainer(load_experiment("grpo_vlm_driving", overrides), run_dir).train()
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "rollout/episode_return" in row:
            shown = {k.split("/")[-1]: row[k] for k in ("rollout/episode_return", "rollout/pdms") if k in row}
            figures = ", ".join(f"{k} {v:.3f}" for k, v in shown.items())
            print(f"grpo step {row['step']}: {figures}", flush=True)
    path = latest_checkpoint(run_dir)
    if path is None:
        raise RuntimeError(f"the GRPO run in {run_dir} wrote no checkpoint")
    return load_checkpoint(path).policy_dir


def load_policy(policy_dir: Path) -> Any:
    """A saved VLM policy, for scoring."""
    from omnigym.platform.cli.policy_spec import resolve_policy

    return resolve_policy(str(policy_dir), ENV_ID, {**ENV_KWARGS, "split": "test"})


def main() -> None:
    """Build, demonstrate, fine-tune, reinforce, score; print the figures (the last line is JSON)."""
    from omnigym.platform.runtime import apply_thread_policy
    from omnigym.policies.vlm.tiny import make_tiny

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="4,096 GRPO env steps instead of 12,288")
    parser.add_argument("--keep", type=Path, default=None, help="copy the SFT and GRPO policies here")
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="torch CPU threads (default $OMNIGYM_THREADS, else 1)",
    )  # fmt: skip
    args = parser.parse_args()
    threads = apply_thread_policy(args.threads)
    grpo_steps = 4_096 if args.quick else 12_288
    start = time.perf_counter()
    references = {name: reference(name) for name in ("constant_velocity", "pdm_closed", "pdm_closed_meta")}
    print(f"references: {references}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
        model = make_tiny("idefics3", root / "model", seed=0)
        data = demonstrations()
        print(f"demonstrations: {data}", flush=True)
        untrained, sft = supervised(model, root / "sft")
        sft_seconds = time.perf_counter() - start
        final_dir = reinforce(root / "sft", grpo_steps, root / "grpo", threads)
        grpo = driving_scores(load_policy(final_dir))
        print(f"after grpo: {grpo}", flush=True)
        if args.keep is not None:
            import shutil

            shutil.copytree(root / "sft", args.keep / "sft", dirs_exist_ok=True)
            shutil.copytree(final_dir, args.keep / "grpo", dirs_exist_ok=True)
    floor = references["constant_velocity"]["pdms"]
    print(json.dumps({
        "bench": "vlm_driving",
        "ratio": round(grpo["pdms"] / floor, 4),
        "pdms": {"untrained": untrained["pdms"], "sft": sft["pdms"], "grpo": grpo["pdms"],
                 **{name: r["pdms"] for name, r in references.items()}},
        "epdms": {"untrained": untrained["epdms"], "sft": sft["epdms"], "grpo": grpo["epdms"],
                  **{name: r["epdms"] for name, r in references.items()}},
        "invalid_replies": {
            "untrained": untrained["invalid"], "sft": sft["invalid"], "grpo": grpo["invalid"]},
        "grpo_gain": round(grpo["pdms"] - sft["pdms"], 4),
        "test_scenes": EVAL["episodes"], "demonstration_steps": data["steps"], "answers": data["answers"],
        "sft_steps": SFT["steps"], "grpo_env_steps": grpo_steps, "torch_threads": threads,
        "quick": args.quick, "sft_seconds": round(sft_seconds, 1),
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
