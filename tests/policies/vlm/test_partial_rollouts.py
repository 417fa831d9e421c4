"""Partial rollouts: a worker's VLM takes weights published mid-reply and records each token's version."""

from __future__ import annotations

import copy
import threading

import torch

from omnigym.core.types import TOKEN_VERSION_KEY
from omnigym.platform.algorithms.decoupled import A3PO, BEHAVIOUR_VERSION_KEY
from omnigym.platform.runtime.admission import AdmissionGate
from omnigym.platform.runtime.data_manager import DataManager, DataManagerConfig
from omnigym.platform.runtime.weight_channel import WeightChannel
from omnigym.platform.runtime.workers import EnvWorker, WorkerStats
from omnigym.platform.vec_env import EnvConfig, make_vec_env

L, SEGMENT = 8, 3


class PublishAt:
    """A logits processor standing in for the learner: publishes new weights at the reply's 2nd token."""

    def __init__(self, channel: WeightChannel, weights: dict[str, torch.Tensor]) -> None:
        self.channel, self.weights, self.calls = channel, weights, 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 2:
            self.channel.publish(self.weights, 1)
        return scores


def test_a_worker_continues_a_reply_under_weights_published_mid_reply(tiny_models, make_policy) -> None:
    envs = make_vec_env(
        EnvConfig(
            id="omnigym/NumberLine-v0", num_envs=2, kwargs={"action_space": "text", "obs_keys": ["text"]}
        )
    )
    learner = make_policy(
        tiny_models["qwen2"], envs.envs[0], obs_keys=("text",), max_prompt_tokens=256, max_new_tokens=L
    )
    envs.close()
    channel = WeightChannel(history=4)
    channel.publish({k: v.detach().clone() for k, v in learner.state_dict().items()}, 0)
    updated = {
        k: v.detach() + 0.05 * torch.randn_like(v) if v.is_floating_point() else v
        for k, v in learner.state_dict().items()
    }
    acting = copy.deepcopy(learner)
    acting.logits_processors = [PublishAt(channel, updated)]
    env_config = EnvConfig(
        id="omnigym/NumberLine-v0", num_envs=2, kwargs={"action_space": "text", "obs_keys": ["text"]}
    )
    worker = EnvWorker(
        0,
        make_envs=lambda: make_vec_env(env_config),
        policy=acting,
        channel=channel,
        data=DataManager(DataManagerConfig(capacity=4)),
        gate=AdmissionGate(1, 1, lambda: 0, 0),
        num_steps=1,
        seed=0,
        stop=threading.Event(),
        stats=WorkerStats(),
        interrupt_every_tokens=SEGMENT,
    )
    worker._open()
    try:
        torch.manual_seed(0)
        rollout, _, chunk_version = worker._collect()
    finally:
        worker._close()
    versions = rollout.extras[TOKEN_VERSION_KEY][0]  # [N, L] of the one step
    assert chunk_version == 0 and (rollout.policy_version == 0).all()  # the chunk started under v0
    assert (versions[:, :SEGMENT] == 0).all() and (versions[:, SEGMENT:] == 1).all()
    assert worker.weights_version == 1
    for name, tensor in worker.policy.state_dict().items():  # the acting copy holds v1 exactly
        assert torch.equal(tensor, updated[name]), name
    # The stored log-probs are each token's own version's: the tail re-scores to them under v1.
    learner.load_state_dict(updated)
    extras = {k: v[0] for k, v in rollout.extras.items()}
    scores = learner.evaluate({}, None, extras).logprob
    tail = rollout.mask[0][:, SEGMENT:]
    assert tail.any(), "every reply ended in the first segment"
    torch.testing.assert_close(
        scores[:, SEGMENT:][tail], rollout.logprob[0][:, SEGMENT:][tail], atol=1e-4, rtol=0
    )


def test_a3po_weights_each_token_by_its_own_version() -> None:
    algo = A3PO.__new__(A3PO)  # only alpha() is exercised: no policy or optimiser needed
    algo.version = 4
    batch = type("Batch", (), {})()
    batch.logprob = torch.zeros(2, 4)
    batch.aux = {BEHAVIOUR_VERSION_KEY: torch.tensor([2, 2])}
    batch.extras = {TOKEN_VERSION_KEY: torch.tensor([[2, 2, 3, 3], [2, 2, 2, 4]])}
    # v_theta = 4, v_prox = 3: alpha = (3 - v) / (4 - v): 1/2 for v = 2, 0 for v = 3 and v = 4
    expected = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.5, 0.5, 0.5, 0.0]])
    torch.testing.assert_close(A3PO.alpha(algo, batch), expected)
    del batch.extras[TOKEN_VERSION_KEY]  # whole replies: the step's version for every token
    torch.testing.assert_close(A3PO.alpha(algo, batch), torch.tensor([0.5, 0.5]))
