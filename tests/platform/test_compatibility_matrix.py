"""Any env x any policy x any algorithm: each combination trains, or stops at start with one line.

``omnigym train`` on a smoke-sized experiment for every (env config, policy, algorithm) of the
matrix: a combination that can work trains one iteration (exit 0); one that cannot exits 2 with a
single stderr line naming the problem and the fix; none ends in a traceback. The default run
checks three refusals; the whole matrix (90 cases: 36 train, 54 refuse, about 4 minutes on 2
workers) is ``slow``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from omnigym.platform.cli import main

ENVS = {
    "driving_vlm": [],
    "driving_vlm_text": ["env.kwargs.action_space=text"],
    "pushcube": [],
    "pushcube_pixels": ["env.kwargs.obs_keys=[image,state]"],
    "pushcube_text": ["env.kwargs.action_space=text", "env.kwargs.obs_keys=[image,text]"],
    "numberline_text": ["env.kwargs.action_space=text", "env.kwargs.instructions=false"],
}
"""Cases: an env config (the name in ``configs/env``, before ``_text`` or ``_pixels``) and its overrides."""
POLICIES = ("mlp", "cnn", "vlm", "flow", "vla")
ALGOS = ("ppo", "grpo", "vldac")
SMALL = {
    "vlm": ["policy.max_new_tokens=4", "policy.max_prompt_tokens=768", "policy.eval_micro_batch_size=8"],
    "flow": ["policy.num_inference_steps=2", "policy.rl_chain=true"],  # its denoising chain as the action
    "vla": ["policy.num_inference_steps=2", "policy.rl_chain=true"],  # a tiny VLM over the flow expert
}
"""Policy overrides that keep a smoke run small."""
TRAINS = {
    ("driving_vlm", "mlp", "ppo"), ("driving_vlm", "mlp", "grpo"),
    ("driving_vlm", "cnn", "ppo"), ("driving_vlm", "cnn", "grpo"),
    ("driving_vlm_text", "vlm", "ppo"), ("driving_vlm_text", "vlm", "grpo"),
    ("driving_vlm_text", "vlm", "vldac"),
    ("driving_vlm", "mlp", "vldac"), ("driving_vlm", "cnn", "vldac"),
    ("pushcube", "mlp", "ppo"), ("pushcube", "mlp", "grpo"), ("pushcube", "mlp", "vldac"),
    ("pushcube", "flow", "ppo"), ("pushcube", "flow", "grpo"), ("pushcube", "flow", "vldac"),
    ("driving_vlm", "vla", "ppo"), ("driving_vlm", "vla", "grpo"), ("driving_vlm", "vla", "vldac"),
    *(("pushcube_pixels", policy, algo) for policy in ("mlp", "cnn", "flow", "vla") for algo in ALGOS),
    ("pushcube_text", "vlm", "ppo"), ("pushcube_text", "vlm", "grpo"), ("pushcube_text", "vlm", "vldac"),
    ("numberline_text", "vlm", "ppo"), ("numberline_text", "vlm", "grpo"),
    ("numberline_text", "vlm", "vldac"),
}  # fmt: skip
"""The combinations that train; every other one must stop at start with one clear line."""
DEFAULT_RUN = {
    ("driving_vlm", "vlm", "grpo"),  # a VLM on the Box plan env: refused, with the text switch named
    ("driving_vlm_text", "mlp", "ppo"),  # an MLP on text actions: refused, naming the policy that fits
    ("pushcube", "vlm", "ppo"),
}
"""The combinations the default test run checks (the rest are ``slow``; a VLM training on the
driving text env is the ``grpo_vlm_driving`` experiment's conformance run)."""


def _cases() -> list:
    cases = []
    for env, policy, algo in itertools.product(ENVS, POLICIES, ALGOS):
        marks = () if (env, policy, algo) in DEFAULT_RUN else (pytest.mark.slow,)
        cases.append(pytest.param(env, policy, algo, marks=marks, id=f"{env}-{policy}-{algo}"))
    return cases


@pytest.mark.parametrize(("env", "policy", "algo"), _cases())
def test_combination_trains_or_stops_with_one_line(
    env: str, policy: str, algo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = tmp_path / "matrix.yaml"
    config = env.removesuffix("_text").removesuffix("_pixels")
    defaults = {"env": config, "policy": policy, "algo": algo, "runtime": "local"}
    experiment.write_text(yaml.safe_dump({"name": "matrix", "seed": 0, "defaults": defaults}))
    steps = ["env.num_envs=8", "algo.num_steps=4", "total_steps=32"]
    if algo == "grpo":
        steps = ["env.num_envs=8", "algo.group_size=4", "env.max_episode_steps=4", "total_steps=32"]
    code = main([
        "train", str(experiment), *steps, *ENVS[env], *SMALL.get(policy, []), f"run_dir={tmp_path / 'run'}",
        "log.progress=false", "log.tensorboard=false", "eval.every_steps=0", "eval.episodes=1",
    ])  # fmt: skip
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[omnigym] ")]
    assert "Traceback" not in err, err
    if (env, policy, algo) in TRAINS:
        assert code == 0, err
    else:
        assert code == 2 and len(lines) == 1, f"exit {code}, stderr:\n{err}"
        assert lines[0].startswith("omnigym train: error: "), lines[0]


def test_a_missing_capability_names_the_switch_that_adds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([
        "train", "ppo_cartpole", "env=pushcube", "policy=flow", "policy.num_inference_steps=2",
        f"run_dir={tmp_path / 'run'}", "log.progress=false",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "needs policy capabilities ['evaluate', 'features']" in err
    assert "; set policy.rl_chain=true" in err and "Traceback" not in err
