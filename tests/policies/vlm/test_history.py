"""Prompt history: past (text, reply) turns of the episode, per env slot, within a token budget."""

import pytest
import torch

from omnigym.policies.vlm.prompts import GAME_PROMPT

L = 8
PROMPT = 320


def prompt_ids(policy, obs, histories):
    """The prompts ``policy`` should build for ``obs`` with the given per-row histories."""
    chats = [policy.messages(t, h) for t, h in zip(obs["text"], histories, strict=True)]
    images = obs["image"].numpy() if "image" in obs else None
    return policy.processor.encode(chats, images, policy.config.max_prompt_tokens).input_ids


def replies_of(policy, step):
    return policy.processor.batch_decode(step.extras["tokens"], step.mask)


def test_without_history_the_prompt_is_unchanged(tiny_models, game_batch, make_policy):
    envs, obs = game_batch
    policy = make_policy(tiny_models["qwen2_vl"], envs[0], max_prompt_tokens=PROMPT, max_new_tokens=L)
    policy.act(obs)
    step = policy.act(obs)  # a second step: still no history with history_steps = 0
    chats = [
        [
            {"role": "system", "content": GAME_PROMPT},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]},
        ]
        for text in obs["text"]
    ]
    fresh = policy.processor.encode(chats, obs["image"].numpy(), PROMPT)
    assert torch.equal(step.extras["prompt_ids"], fresh.input_ids)
    assert torch.equal(step.extras["prompt_mask"], fresh.attention_mask)


@pytest.mark.parametrize(("arch", "which"), [("qwen2", "text_batch"), ("idefics3", "game_batch")])
def test_history_shows_past_replies_per_row_and_resets(tiny_models, arch, which, request, make_policy):
    envs, obs = request.getfixturevalue(which)
    # Room for the current turn and two past ones: nothing is dropped here.
    policy = make_policy(
        tiny_models[arch],
        envs[0],
        history_steps=2,
        obs_keys=tuple(obs),
        temperature=0.7,
        max_prompt_tokens=640,
        max_new_tokens=L,
    )
    torch.manual_seed(0)
    first = policy.act(obs)
    # Between two act calls, prompts (features) see the history act used: none yet.
    assert torch.equal(policy.encode_obs(obs).input_ids.cpu(), first.extras["prompt_ids"])
    turns1 = list(zip(obs["text"], replies_of(policy, first), strict=True))
    second = policy.act(obs)
    assert torch.equal(second.extras["prompt_ids"], prompt_ids(policy, obs, [[t] for t in turns1]))
    decoded = policy.processor.tokenizer.decode(second.extras["prompt_ids"][0], skip_special_tokens=True)
    assert decoded.count(obs["text"][0]) == 2 and turns1[0][1].strip() in decoded
    evaluation = policy.evaluate(obs, None, second.extras)
    torch.testing.assert_close(evaluation.logprob, second.logprob, atol=1e-4, rtol=0)

    turns2 = list(zip(obs["text"], replies_of(policy, second), strict=True))
    policy.reset(torch.tensor([True, False, False, False]))  # row 0's episode ended
    third = policy.act(obs)
    expected = [[], *([a, b] for a, b in zip(turns1[1:], turns2[1:], strict=True))]
    assert torch.equal(third.extras["prompt_ids"], prompt_ids(policy, obs, expected))
    policy.act(obs)
    # Row 0 holds its one step since the reset; the others three steps, capped at history_steps.
    assert [len(turns) for turns in policy.history.turns] == [1, 2, 2, 2]

    fewer = {key: value[:2] for key, value in obs.items()}  # another batch size: a fresh start
    assert torch.equal(policy.act(fewer).extras["prompt_ids"], prompt_ids(policy, fewer, [[], []]))
    policy.reset()
    assert policy.history.turns == []


def test_history_budget_drops_the_oldest_turns_first(tiny_models, text_batch, make_policy):
    envs, obs = text_batch
    policy = make_policy(tiny_models["qwen2"], envs[0], obs_keys=("text",), history_steps=2, max_new_tokens=L)
    text = str(obs["text"][0])
    turns = [("old step " * 20, "<answer>-</answer>"), ("recent step", "<answer>+</answer>")]
    lengths = [
        len(policy.processor.tokenize([policy.messages(text, turns[k:])], None)[0][0]) for k in range(3)
    ]
    assert lengths[0] > lengths[1] > lengths[2]
    one = {"text": obs["text"][:1]}
    policy.history.commit(1)
    policy.history.turns = [list(turns)]
    for budget, kept in ((lengths[0], turns), (lengths[0] - 1, turns[1:]), (lengths[2], [])):
        policy.config.max_prompt_tokens = budget
        ids = policy.encode_obs(one).input_ids
        assert ids.shape == (1, budget)
        assert torch.equal(ids, prompt_ids(policy, one, [kept]))  # exactly fits, current turn whole
    decoded = policy.processor.tokenizer.decode(prompt_ids(policy, one, [turns[1:]])[0])
    assert "recent step" in decoded and "old step" not in decoded and decoded.count(text) == 1
