"""VLM agent rollouts on CPU: generation throughput by batch size, and where a rollout's time goes.

A tiny random vision-language model (``omnigym vlm make-tiny``, offline) acts as the ``vlm`` policy
in ``omnigym/GUI-ClickButton-v0`` (160x210 screenshot + instruction and accessibility tree, text
actions), sampling ``max_new_tokens`` = 32 per step:

1. Throughput: ``policy.act`` on batches of 1 and 16 observations (one batched, KV-cached
   ``generate`` each), generated tokens per second (tokens counted up to and including EOS).
2. A rollout of 16 envs x 8 steps: the time spent generating, stepping the envs, and re-scoring
   every generated token under the current weights (``policy.evaluate``, as PPO/GRPO do).

Last line: one JSON object; ``ratio`` = tokens/s at batch 16 / tokens/s at batch 1 (batching
amortises the per-call overhead; the issue's target is at least 4), and the time split.

Torch runs on ``--threads N`` CPU threads (default ``$OMNIGYM_THREADS``, else 1; ``torch_threads``
in the JSON). Figures measured before this option (issue 27) used torch's default, one thread per
core (2 on the 2-core machine of the docs' figures).

Usage: ``omnigym bench vlm_rollout [--quick] [--arch qwen2_vl|qwen2_5_vl|idefics3] [--threads N]``
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
import torch

DURATIONS = {"quick": "about 30 s (beside two training jobs)", "full": "not recorded"}
"""Quick: timed 2026-12-03 on the 2-core CPU beside two training jobs; full: not timed."""

ENV_ID = "omnigym/GUI-ClickButton-v0"
MAX_NEW_TOKENS = 32


def observations(count: int, seed: int = 0) -> dict[str, Any]:
    """``count`` first observations of the env, batched (image tensor, list of texts)."""
    from omnigym.platform.vec_env import make_env

    env = make_env(ENV_ID)
    obs = [env.reset(seed=seed + i)[0] for i in range(count)]
    env.close()
    return {"image": torch.from_numpy(np.stack([o["image"] for o in obs])), "text": [o["text"] for o in obs]}


def tokens_per_second(policy: Any, batch: int, repeats: int) -> float:
    """Generated tokens per second of ``policy.act`` on batches of ``batch`` observations."""
    obs = observations(batch)
    policy.act(obs)  # warm-up
    tokens, seconds = 0.0, 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        step = policy.act(obs)
        seconds += time.perf_counter() - start
        tokens += float(step.mask.sum())
    return tokens / seconds


def rollout_split(policy: Any, num_envs: int, steps: int) -> dict[str, float]:
    """Seconds spent generating, stepping envs and re-scoring in one rollout."""
    from omnigym.platform.vec_env import EnvConfig, make_vec_env

    envs = make_vec_env(EnvConfig(id=ENV_ID, num_envs=num_envs))
    obs, _ = envs.reset(seed=0)
    timing = {"generate_s": 0.0, "env_s": 0.0, "rescore_s": 0.0}
    images, texts, extras = [], [], []
    for _ in range(steps):
        batch = {"image": torch.from_numpy(obs["image"]), "text": list(obs["text"])}
        start = time.perf_counter()
        step = policy.act(batch)
        timing["generate_s"] += time.perf_counter() - start
        images.append(batch["image"])
        texts += batch["text"]
        extras.append(step.extras)
        start = time.perf_counter()
        obs, *_ = envs.step(tuple(step.action))
        timing["env_s"] += time.perf_counter() - start
    envs.close()
    flat = {key: torch.cat([e[key] for e in extras]) for key in extras[0]}
    start = time.perf_counter()
    evaluation = policy.evaluate({"image": torch.cat(images), "text": texts}, torch.zeros(len(texts)), flat)
    evaluation.logprob.sum().backward()  # what a training step pays
    timing["rescore_s"] = time.perf_counter() - start
    return timing


def main() -> None:
    """Build the tiny model, measure, print the figures (the last line is JSON)."""
    from omnigym.platform.runtime import apply_thread_policy
    from omnigym.platform.vec_env import make_env
    from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig
    from omnigym.policies.vlm.tiny import make_tiny

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats and a shorter rollout")
    parser.add_argument("--arch", default="qwen2_vl", choices=["qwen2_vl", "qwen2_5_vl", "idefics3"])
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="torch CPU threads (default $OMNIGYM_THREADS, else 1)",
    )  # fmt: skip
    args = parser.parse_args()
    threads = apply_thread_policy(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    repeats, steps = (3, 4) if args.quick else (10, 8)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny(args.arch, Path(tmp) / "model")
        env = make_env(ENV_ID)
        config = VLMPolicyConfig(model=str(model), max_new_tokens=MAX_NEW_TOKENS, eval_micro_batch_size=16)
        policy = VLMPolicy(config, env.observation_space, env.action_space)
        env.close()
        batch1 = tokens_per_second(policy, 1, repeats)
        batch16 = tokens_per_second(policy, 16, repeats)
        print(f"{args.arch}: {batch1:,.0f} tokens/s at batch 1, {batch16:,.0f} tokens/s at batch 16")
        split = rollout_split(policy, num_envs=16, steps=steps)
    total = sum(split.values())
    shares = {f"{key[:-2]}_share": value / total for key, value in split.items()}
    print(f"rollout of 16 envs x {steps} steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in split.items()))
    print(json.dumps({
        "bench": "vlm_rollout", "ratio": batch16 / batch1, "arch": args.arch,
        "tokens_per_s_batch1": batch1, "tokens_per_s_batch16": batch16,
        **split, **shares, "max_new_tokens": MAX_NEW_TOKENS, "torch_threads": threads, "quick": args.quick,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
