import pickle

import pytest
import torch
from torch import nn

from omnigym.platform.runtime.weight_sync import (
    BaseVersionError,
    WeightPayload,
    WeightPublisher,
    WeightReceiver,
    WeightSyncConfig,
    bit_view,
    changed_indices,
)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bit_view(a), bit_view(b))


def assert_same_bits(received: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert received.keys() == expected.keys()
    for name, tensor in expected.items():
        assert bits_equal(received[name], tensor), name


def nan_with_payload(payload: int) -> torch.Tensor:
    """A float32 quiet NaN whose mantissa carries ``payload``."""
    return torch.tensor([0x7FC00000 | payload], dtype=torch.int32).view(torch.float32)


def mixed_state(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "w32": torch.randn(1000, generator=generator),
        "w_bf16": torch.randn(64, 32, generator=generator).to(torch.bfloat16),
        "w_fp16": torch.randn(100, generator=generator).to(torch.float16),
        "steps": torch.tensor(0, dtype=torch.int64),
        "mask": torch.zeros(50, dtype=torch.bool),
    }


def perturb(state: dict[str, torch.Tensor], generator: torch.Generator, fraction: float) -> None:
    """Change a random ``fraction`` of every float tensor in place, bump the counter, flip mask bits."""
    for name in ("w32", "w_bf16", "w_fp16"):
        flat = state[name].view(-1)
        picked = torch.rand(flat.numel(), generator=generator) < fraction
        flat[picked] = torch.randn(int(picked.sum()), generator=generator).to(flat.dtype)
    state["steps"] += 1
    state["mask"][torch.randint(0, 50, (3,), generator=generator)] ^= True


def test_sparse_sync_is_bit_exact_over_random_partial_updates_with_signed_zeros_and_nans() -> None:
    generator = torch.Generator().manual_seed(0)
    learner = mixed_state(generator)
    publisher, receiver = WeightPublisher(WeightSyncConfig(mode="sparse")), WeightReceiver()
    receiver.apply(publisher.publish(learner, version=0))
    assert_same_bits(receiver.state, learner)
    for version in range(1, 7):
        perturb(learner, generator, fraction=0.05)
        if version == 2:
            learner["w32"][:3] = 0.0
        if version == 3:  # value-equal to the previous round, different bits
            learner["w32"][:3] = -0.0
            learner["w32"][3] = nan_with_payload(1).item()
            learner["w_bf16"].view(-1)[0] = -0.0
        if version == 4:  # NaN -> NaN with another payload
            learner["w32"][3:4] = nan_with_payload(2)
        payload = publisher.publish(learner, version)
        assert payload.base_version == version - 1 and not payload.is_full
        assert 0 < payload.bytes < payload.dense_bytes
        receiver.apply(payload)
        assert receiver.version == version
        assert_same_bits(receiver.state, learner)
        if version == 3:
            assert set(payload.sparse["w32"].indices[:4].tolist()) == {0, 1, 2, 3}
            assert torch.signbit(receiver.state["w32"][:3]).all()
        if version == 4:
            assert 3 in payload.sparse["w32"].indices.tolist()
            assert bit_view(receiver.state["w32"])[3].item() == 0x7FC00002


def test_changed_indices_compares_bits_not_values() -> None:
    old = torch.tensor([0.0, 1.0, float("nan"), 2.0])
    new = torch.tensor([-0.0, 1.0, float("nan"), 3.0])
    assert changed_indices(old, new).tolist() == [0, 3]  # same NaN bits: unchanged; -0.0: changed
    assert changed_indices(old, new).dtype == torch.int32


def test_ten_changed_float32_cost_exactly_their_indices_and_values() -> None:
    weights = {"w": torch.arange(1000, dtype=torch.float32)}
    publisher = WeightPublisher()
    publisher.publish(weights, version=0)
    changed = torch.arange(0, 1000, 100)
    weights["w"][changed] += 0.5
    payload = publisher.publish(weights, version=1)
    delta = payload.sparse["w"]
    assert delta.indices.dtype == torch.int32 and delta.indices.tolist() == changed.tolist()
    assert torch.equal(delta.values, changed.float() + 0.5)
    assert payload.bytes == 10 * 4 + 10 * 4
    assert payload.dense_bytes == 1000 * 4
    assert payload.bytes_saved == 3920
    assert not payload.dense


def test_unchanged_tensors_are_not_sent() -> None:
    weights = {"a": torch.ones(10), "b": torch.zeros(5, dtype=torch.int64)}
    publisher = WeightPublisher()
    publisher.publish(weights, version=0)
    payload = publisher.publish(weights, version=1)
    assert payload.bytes == 0 and payload.dense_bytes == 10 * 4 + 5 * 8
    assert not payload.sparse and not payload.dense


def test_delta_for_the_wrong_base_raises_and_a_full_sync_recovers() -> None:
    weights = {"w": torch.zeros(100)}
    publisher, receiver = WeightPublisher(), WeightReceiver()
    with pytest.raises(RuntimeError, match="nothing published"):
        publisher.full_payload()
    first = publisher.publish(weights, version=0)
    weights["w"][0] = 1.0
    second = publisher.publish(weights, version=1)
    with pytest.raises(BaseVersionError, match="no weights received yet"):
        receiver.apply(second)
    receiver.apply(first)
    weights["w"][1] = 2.0
    third = publisher.publish(weights, version=2)
    with pytest.raises(BaseVersionError, match=r"1 -> 2 does not apply to weights of version 0"):
        receiver.apply(third)  # missed version 1
    assert receiver.version == 0 and receiver.state["w"].sum().item() == 0.0
    recovery = publisher.full_payload()
    assert recovery.is_full and recovery.version == 2 and recovery.bytes == recovery.dense_bytes == 400
    receiver.apply(recovery)
    assert_same_bits(receiver.state, weights)


def test_versions_must_increase() -> None:
    publisher = WeightPublisher()
    publisher.publish({"w": torch.zeros(3)}, version=4)
    with pytest.raises(ValueError, match="must increase"):
        publisher.publish({"w": torch.ones(3)}, version=4)


def test_tensors_mostly_changed_are_sent_whole() -> None:
    weights = {"w": torch.zeros(1000), "h": torch.zeros(300, dtype=torch.bfloat16)}
    publisher, receiver = WeightPublisher(), WeightReceiver()
    receiver.apply(publisher.publish(weights, version=0))
    weights["w"][:400] = 1.0  # sparse 400 * 8 = 3200 < 4000 dense
    weights["h"][:100] = 1.0  # bf16 + int32 index: sparse 100 * 6 = 600, dense 600: not smaller -> whole
    payload = publisher.publish(weights, version=1)
    assert set(payload.sparse) == {"w"} and set(payload.dense) == {"h"}
    assert payload.bytes == 400 * 8 + 300 * 2
    receiver.apply(payload)
    weights["w"][:600] = 2.0  # 600 * 8 = 4800 > 4000: whole
    payload = publisher.publish(weights, version=2)
    assert set(payload.dense) == {"w"} and payload.bytes == 4000
    receiver.apply(payload)
    assert_same_bits(receiver.state, weights)


def test_dense_threshold_overrides_the_break_even() -> None:
    weights = {"w": torch.zeros(1000)}
    publisher = WeightPublisher(WeightSyncConfig(dense_threshold=0.1))
    publisher.publish(weights, version=0)
    weights["w"][:100] = 1.0
    assert set(publisher.publish(weights, version=1).sparse) == {"w"}  # 10% is not more than 10%
    weights["w"][:101] = 2.0
    assert set(publisher.publish(weights, version=2).dense) == {"w"}


def test_full_mode_sends_everything_every_time() -> None:
    weights = {"w": torch.zeros(10), "n": torch.tensor(3)}
    publisher, receiver = WeightPublisher(WeightSyncConfig(mode="full")), WeightReceiver()
    for version in range(3):
        weights["w"][version] = float(version + 1)
        payload = publisher.publish(weights, version)
        assert payload.is_full and set(payload.dense) == {"w", "n"}
        assert payload.bytes == payload.dense_bytes == 10 * 4 + 8
        receiver.apply(payload)
    weights["w"][5] = 9.0  # the learner changes its tensors in place after publishing
    assert publisher.full_payload().dense["w"][5].item() == 0.0
    assert receiver.state["w"].tolist()[:4] == [1.0, 2.0, 3.0, 0.0]


def test_layout_change_falls_back_to_a_full_payload() -> None:
    publisher, receiver = WeightPublisher(), WeightReceiver()
    receiver.apply(publisher.publish({"w": torch.zeros(4)}, version=0))
    payload = publisher.publish({"w": torch.zeros(5)}, version=1)
    assert payload.is_full
    receiver.apply(payload)
    payload = publisher.publish({"w": torch.ones(5), "extra": torch.ones(2)}, version=2)
    assert payload.is_full and set(receiver.apply(payload)) == {"w", "extra"}


def test_payloads_survive_pickling() -> None:
    weights = {"w": torch.zeros(100)}
    publisher, receiver = WeightPublisher(), WeightReceiver()
    receiver.apply(pickle.loads(pickle.dumps(publisher.publish(weights, version=0))))
    weights["w"][7] = -0.0
    payload = pickle.loads(pickle.dumps(publisher.publish(weights, version=1)))
    assert isinstance(payload, WeightPayload) and payload.bytes == 8
    receiver.apply(payload)
    assert_same_bits(receiver.state, weights)


def test_one_payload_applied_by_two_receivers_leaves_them_independent() -> None:
    publisher, first, second = WeightPublisher(), WeightReceiver(), WeightReceiver()
    payload = publisher.publish({"w": torch.zeros(3)}, version=0)
    first.apply(payload)
    second.apply(payload)
    first.state["w"][0] = 5.0
    assert second.state["w"][0].item() == 0.0 and payload.dense["w"][0].item() == 0.0


def test_module_with_frozen_layer_and_integer_buffers_syncs_into_a_copy() -> None:
    torch.manual_seed(0)
    learner = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    worker = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    learner[0].requires_grad_(False)
    optimizer = torch.optim.SGD([p for p in learner.parameters() if p.requires_grad], lr=0.1)
    publisher, receiver = WeightPublisher(), WeightReceiver()
    receiver.apply(publisher.publish(learner.state_dict(), version=0))
    for version in range(1, 4):
        learner.train()
        loss = learner(torch.randn(32, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        payload = publisher.publish(learner.state_dict(), version)
        sent = set(payload.sparse) | set(payload.dense)
        assert "0.weight" not in sent and "0.bias" not in sent  # frozen: unchanged, not sent
        assert "1.num_batches_tracked" in sent  # int64 buffer
        receiver.apply(payload)
        assert receiver.state["1.num_batches_tracked"].item() == version
    receiver.load_into(worker)
    assert_same_bits(worker.state_dict(), learner.state_dict())
    learner.eval()
    worker.eval()
    x = torch.randn(4, 8)
    assert torch.equal(worker(x), learner(x))


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="mode"):
        WeightSyncConfig(mode="delta")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dense_threshold"):
        WeightSyncConfig(dense_threshold=1.5)
