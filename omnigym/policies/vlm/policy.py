"""``VLMPolicy``: a Hugging Face vision-language (or text-only language) model in text-action envs.

One step: the observation (``image`` screenshot or game frame, ``text`` instruction/state) becomes
a chat prompt (system prompt, then, with ``history_steps``, the episode's recent steps as earlier
user/assistant turns, then one user turn with the image and the text), the model
generates a reply (``<think>...</think><answer>ACTION</answer>`` by default) in ONE batched,
KV-cached ``generate`` call, and the reply's answer is the env action. Every generated token is
an action *part*: ``logprob``/``mask`` are ``[B, max_new_tokens]`` and the prompt and token ids go
to ``extras`` so :meth:`VLMPolicy.evaluate` can re-score them under new weights (PPO/GRPO ratios)
and :meth:`VLMPolicy.compute_loss` can train them by supervised fine-tuning.

Log-probabilities are those of the *temperature-scaled* distribution ``softmax(logits / T)`` with
``T = config.temperature``, always (also for greedy acting, which picks its argmax): act takes the
raw logits ``generate`` returns (``output_logits``) and evaluate recomputes them with one forward
pass over prompt + completion, so both give the same numbers for the same weights. ``top_p``
restricts sampling but not the scored distribution (as in most RL-for-LLM code); keep
``top_p = 1`` when exact importance ratios matter.

A text-only causal language model (``AutoModelForCausalLM``, e.g. Qwen2.5-Instruct) is loaded
when the model's config has no vision part (or ``model_class: causal_lm``); it reads ``text`` only.
``features`` (for a critic, e.g. VL-DAC's) is the last layer's hidden state at the prompt's final
token: the state from which the reply is generated.

The prompts' parts (system prompts, each slot's past turns, reading ``text``/``image``) are in
:mod:`omnigym.policies.vlm.prompts`, the tokenising and image processing in
:mod:`omnigym.policies.vlm.processing`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from gymnasium import spaces
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from omnigym.core.config import build_dataclass
from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.pretrained import CONFIG_FILE, WEIGHTS_FILE
from omnigym.core.spaces import space_from_json
from omnigym.core.text_actions import answer_text
from omnigym.core.types import OBS_IMAGE, OBS_TEXT, TOKEN_VERSION_KEY, Evaluation, Obs, PolicyStep
from omnigym.policies.vlm.processing import Message, VLMInputs, VLMProcessor
from omnigym.policies.vlm.prompts import (
    PromptHistory,
    Turn,
    default_system_prompt,
    observation_images,
    observation_texts,
)
from omnigym.policies.vlm.tiny import resolve_model

HF_DIR = "hf"
"""Sub-directory of a saved policy that holds the Hugging Face model, tokenizer and processor."""
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODEL_CLASSES = {"image_text_to_text": "AutoModelForImageTextToText", "causal_lm": "AutoModelForCausalLM"}
"""``model_class`` -> the ``transformers`` auto class that loads it."""
EXTRAS_KEYS = ("prompt_ids", "prompt_mask", "tokens")


@dataclass
class VLMPolicyConfig(PolicyConfig):
    """A vision-language model policy over ``image`` + ``text`` observations and text actions."""

    type: str = "vlm"
    model: str = ""
    """Hugging Face model directory or hub id (a VLM, or a text-only causal language model), or
    ``tiny:ARCH[:SEED]`` for a tiny random model built offline on first use (tests, smoke runs)."""
    model_class: Literal["auto", "image_text_to_text", "causal_lm"] = "auto"
    """``auto``: ``causal_lm`` (``AutoModelForCausalLM``, text only) when the model's config has no
    ``vision_config``, else ``image_text_to_text`` (``AutoModelForImageTextToText``)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weight dtype; log-probabilities are always computed in float32."""
    obs_keys: tuple[str, ...] = (OBS_IMAGE, OBS_TEXT)
    """Observation keys in the prompt: ``image`` (one image per prompt) and/or ``text``."""
    system_prompt: str | None = None
    """System turn; None picks one from the text's header (``game:`` or ``instruction:``)."""
    output_format: Literal["answer", "raw"] = "answer"
    """``answer``: the action is the ``<answer>`` part of the reply (``answer_text``); ``raw``:
    the whole reply."""
    max_prompt_tokens: int = 512
    """Every prompt is left-padded (or truncated after its image) to exactly this many tokens."""
    history_steps: int = 0
    """Past steps of the current episode shown as earlier chat turns (text and reply, no image);
    the oldest are dropped first when the prompt would exceed ``max_prompt_tokens``."""
    max_new_tokens: int = 64
    """Tokens generated per step (the number of action parts ``L``)."""
    temperature: float = 1.0
    """Sampling temperature; log-probabilities are those of ``softmax(logits / temperature)``."""
    top_p: float = 1.0
    """Nucleus sampling mass (sampling only; not applied to log-probabilities)."""
    eval_micro_batch_size: int = 8
    """Rows per forward pass in ``evaluate`` (memory); gradients accumulate across them."""
    lora_r: int = 0
    """LoRA rank; 0 trains (or freezes) the full model."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input (keep 0 for exact act/evaluate agreement in training mode)."""
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Linear layer names that get adapters, in the language model only (vision tower excluded)."""

    def __post_init__(self) -> None:
        """Reject settings that cannot work before a model is loaded."""
        self.obs_keys = tuple(self.obs_keys)
        self.lora_target_modules = tuple(self.lora_target_modules)
        if not self.model:
            raise ValueError("policy.model must name a Hugging Face model directory or hub id")
        if not self.obs_keys or set(self.obs_keys) - {OBS_IMAGE, OBS_TEXT}:
            raise ValueError(f"obs_keys must be a non-empty subset of ('image', 'text'), got {self.obs_keys}")
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (greedy acting is deterministic=True), got {self.temperature}"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        for name in ("max_prompt_tokens", "max_new_tokens", "eval_micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.history_steps < 0:
            raise ValueError(f"history_steps must be >= 0, got {self.history_steps}")


def resolve_model_class(model: str, model_class: str) -> str:
    """``model_class``, or for ``auto`` the one the model's config calls for (no vision: causal LM)."""
    if model_class != "auto":
        return model_class
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model)
    return "image_text_to_text" if getattr(config, "vision_config", None) is not None else "causal_lm"


def completion_mask(tokens: Tensor, eos_token_id: int) -> Tensor:
    """True on each completion's tokens up to and including its first EOS. Shape: tokens' [B, L]."""
    is_eos = (tokens == eos_token_id).long()
    eos_before = is_eos.cumsum(dim=1) - is_eos  # EOS tokens strictly before each position
    return eos_before == 0


class VLMPolicy(Policy):
    """A Hugging Face VLM (Qwen2-VL, Qwen2.5-VL, Idefics3/SmolVLM, ...) or LM as an omnigym policy.

    Extras of each step: ``prompt_ids`` ``[B, max_prompt_tokens]`` (long, with the history turns),
    ``prompt_mask`` ``[B, max_prompt_tokens]`` (bool) and ``tokens`` ``[B, max_new_tokens]`` (long,
    pad after EOS). Images are not stored in extras: ``evaluate`` re-processes ``obs["image"]``.
    """

    name: ClassVar[str] = "vlm"
    config_class: ClassVar[type[PolicyConfig]] = VLMPolicyConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Text,)
    obs_key_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Text)
    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"act", "evaluate", "compute_loss", "features", "trainable"}
    )

    def __init__(
        self, config: VLMPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        import transformers

        self.config: VLMPolicyConfig = config
        if not isinstance(action_space, spaces.Text):
            raise TypeError(f"a VLM writes text actions: the action space must be Text, got {action_space}")
        missing = set(config.obs_keys) - set(observation_space.spaces)
        if missing:
            raise ValueError(f"policy.obs_keys {sorted(missing)} are not in the observation space")
        model_dir = resolve_model(config.model)
        model_class = resolve_model_class(model_dir, config.model_class)
        self.text_only = model_class == "causal_lm"
        if self.text_only and config.obs_keys != (OBS_TEXT,):
            raise ValueError(
                f"{config.model} is a text-only language model (model_class causal_lm): it cannot read "
                f"images, so policy.obs_keys must be ('text',), got {config.obs_keys}"
            )
        self.processor = VLMProcessor(model_dir, text_only=self.text_only)
        self._suppressed = self.processor.multimodal_token_ids
        auto_class = getattr(transformers, MODEL_CLASSES[model_class])
        model = auto_class.from_pretrained(model_dir, dtype=DTYPES[config.dtype])
        self._feature_dim = int(model.config.get_text_config().hidden_size)
        self.model: Any = self._with_lora(model) if config.lora_r > 0 else model
        self.history = PromptHistory(config.history_steps)
        self.logits_processors: list[Any] = []
        """Extra ``transformers`` logits processors for acting (constrained decoding, simulated
        reply lengths); they shape what is sampled, the log-probabilities stay the model's."""
        self.segment_tokens = 0
        """Interruptible generation (partial rollouts): with ``segment_hook`` set, replies are
        generated ``segment_tokens`` at a time and the hook runs before each segment."""
        self.segment_hook: Callable[[], int] | None = None
        """Called before each segment (it may load newer weights) and returns the weights' version;
        each token's version goes to ``extras["token_version"]`` (set by the async runtime's
        workers with ``runtime.async.interrupt_every_tokens``)."""

    def _with_lora(self, model: Any) -> Any:
        """Wrap ``model`` with LoRA adapters on the language model's ``lora_target_modules``."""
        from peft import LoraConfig, get_peft_model

        names = "|".join(self.config.lora_target_modules)
        lora = LoraConfig(
            r=self.config.lora_r,
            lora_alpha=self.config.lora_alpha,
            lora_dropout=self.config.lora_dropout,
            # A regex (full match) keeps the vision tower's layers of the same names frozen.
            target_modules=rf"^(?!.*(?:visual|vision)).*\.(?:{names})$",
        )
        return get_peft_model(model, lora)

    @property
    def num_new_tokens(self) -> int:
        """``L``, the action parts per step."""
        return self.config.max_new_tokens

    @property
    def feature_dim(self) -> int:
        """Width of :meth:`features`: the (language) model's hidden size."""
        return self._feature_dim

    def reset(self, done_mask: Tensor | None = None) -> None:
        """Forget the prompt history of the rows where ``done_mask`` ``[B]`` is True (all: None)."""
        self.history.reset(done_mask)

    # --- prompts ------------------------------------------------------------------------------
    def messages(self, text: str, history: Sequence[Turn] = ()) -> list[Message]:
        """The chat of one observation: system turn, past (text, reply) turns, the user turn."""
        system = (
            self.config.system_prompt
            if self.config.system_prompt is not None
            else default_system_prompt(text)
        )
        chat: list[Message] = [{"role": "system", "content": system}]
        for past_text, reply in history:
            chat.append({"role": "user", "content": self._content(past_text, with_image=False)})
            chat.append(
                {"role": "assistant", "content": self._content(reply, with_image=False, is_reply=True)}
            )
        chat.append({"role": "user", "content": self._content(text, OBS_IMAGE in self.config.obs_keys)})
        return chat

    def _content(self, text: str, with_image: bool, is_reply: bool = False) -> str | list[dict[str, Any]]:
        """A turn's content: a string for a text-only model (every chat template takes one).

        For a VLM, typed parts: the image slot first, then the text when ``text`` is observed or
        the turn is a reply.
        """
        if self.text_only:
            return text
        content: list[dict[str, Any]] = [{"type": "image"}] if with_image else []
        if is_reply or OBS_TEXT in self.config.obs_keys:
            content.append({"type": "text", "text": text})
        return content

    def encode_obs(self, obs: Obs) -> VLMInputs:
        """Prompts ``[B, max_prompt_tokens]`` (with each row's history) and pixel inputs of a batch."""
        texts = observation_texts(obs, self.config.obs_keys)
        images = observation_images(obs) if OBS_IMAGE in self.config.obs_keys else None
        history = self.history.rows(len(texts))
        chats = [self.messages(t, h) for t, h in zip(texts, history, strict=True)]
        rows, pixel_inputs = self.processor.tokenize(chats, images)
        for i, turns in enumerate(history):
            if turns and len(rows[i]) > self.config.max_prompt_tokens:
                rows[i] = self._fit_history(
                    rows[i], texts[i], turns, None if images is None else images[i : i + 1]
                )
        inputs = self.processor.pad(rows, pixel_inputs, self.config.max_prompt_tokens)
        return inputs.to(self.device, self._dtype)

    def _fit_history(self, ids: Tensor, text: str, turns: list[Turn], image: Any) -> Tensor:
        """One prompt's ids with its oldest turns dropped until it fits ``max_prompt_tokens``.

        The current turn always stays (if it alone is too long, ``pad`` truncates it as usual).
        """
        while turns and len(ids) > self.config.max_prompt_tokens:
            turns = turns[1:]
            (ids,), _ = self.processor.tokenize([self.messages(text, turns)], image)
        return ids

    @property
    def _dtype(self) -> torch.dtype:
        return DTYPES[self.config.dtype]

    # --- acting -------------------------------------------------------------------------------
    @torch.no_grad()  # not inference_mode: the extras are used later in autograd (evaluate)
    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """Generate one reply per observation (one batched, KV-cached ``generate`` call).

        With :attr:`segment_hook` set, one call per segment (interruptible generation).

        Returns:
            action: ``B`` strings; logprob: float32 ``[B, L]`` (0 after EOS); mask: bool
            ``[B, L]``, True up to and including EOS; extras: ``prompt_ids``, ``prompt_mask``,
            ``tokens`` and, with a segment hook, ``token_version`` (int64 ``[B, L]``).
        """
        texts = observation_texts(obs, self.config.obs_keys)
        self.history.commit(len(texts))
        inputs = self.encode_obs(obs)
        sequences, logits, versions = self._generate(inputs, deterministic)
        tokens = self._pad_completion(sequences)
        mask = completion_mask(tokens, self.processor.eos_token_id)
        tokens = tokens.masked_fill(~mask, self.processor.pad_token_id)
        logprob = torch.zeros(tokens.shape, device=tokens.device)
        logprob[:, : logits.shape[1]], _ = self._token_stats(logits, tokens[:, : logits.shape[1]])
        logprob = logprob.masked_fill(~mask, 0.0)
        extras = {"prompt_ids": inputs.input_ids, "prompt_mask": inputs.attention_mask, "tokens": tokens}
        if versions is not None:
            extras[TOKEN_VERSION_KEY] = versions
        replies = self.processor.batch_decode(tokens, mask)
        if self.config.history_steps > 0:
            self.history.record(texts, replies)
        return PolicyStep(self._actions(replies), logprob, mask, extras)

    def _generate(self, inputs: VLMInputs, deterministic: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        """Completion tokens ``[B, <=L]``, raw logits ``[B, <=L, V]``, token versions ``[B, L]``.

        The versions are None without a segment hook; then it is one ``generate`` call. With one:
        segments of ``segment_tokens``; before each the hook may swap in newer weights, and the
        next segment re-reads prompt + reply so far under them (the KV cache of the old weights is
        dropped, as AReaL's partial rollouts do).
        """
        hook, step = self.segment_hook, self.segment_tokens
        if hook is None or step <= 0:
            out = self._generate_once(inputs, self.num_new_tokens, deterministic)
            return out.sequences[:, inputs.input_ids.shape[1] :], torch.stack(out.logits, dim=1), None
        eos = self.processor.eos_token_id
        parts: list[Tensor] = []
        logits: list[Tensor] = []
        versions: list[tuple[int, int]] = []
        current, generated = inputs, 0
        while generated < self.num_new_tokens:
            version = hook()
            out = self._generate_once(current, min(step, self.num_new_tokens - generated), deterministic)
            parts.append(out.sequences[:, current.input_ids.shape[1] :])
            logits.append(torch.stack(out.logits, dim=1))
            versions.append((version, parts[-1].shape[1]))
            generated += parts[-1].shape[1]
            reply = torch.cat(parts, dim=1)
            if bool((reply == eos).any(dim=1).all()):
                break  # every row has ended
            current = self._continuation(inputs, reply)
        reply = torch.cat(parts, dim=1)
        per_token = [v for v, n in versions for _ in range(n)]
        per_token += [per_token[-1]] * (self.num_new_tokens - len(per_token))
        token_version = torch.tensor(per_token, dtype=torch.long, device=reply.device).expand(len(reply), -1)
        return reply, torch.cat(logits, dim=1), token_version.clone()

    def _generate_once(self, inputs: VLMInputs, max_new_tokens: int, deterministic: bool) -> Any:
        """One KV-cached ``generate`` call of up to ``max_new_tokens`` (raw logits kept)."""
        sampling = {"temperature": self.config.temperature, "top_p": self.config.top_p, "top_k": 0}
        return self.model.generate(
            **inputs.model_kwargs(),
            do_sample=not deterministic,
            max_new_tokens=max_new_tokens,
            use_cache=True,
            output_logits=True,  # raw logits, before temperature/top-p: rescaled by _token_stats
            return_dict_in_generate=True,
            eos_token_id=self.processor.eos_token_id,
            pad_token_id=self.processor.pad_token_id,
            suppress_tokens=self._suppressed,
            **self._generation_hooks(),
            **({} if deterministic else sampling),
        )

    def _continuation(self, inputs: VLMInputs, reply: Tensor) -> VLMInputs:
        """The prompt followed by the reply so far, attended as :meth:`_score` attends it."""
        input_ids = torch.cat([inputs.input_ids, reply], dim=1)
        attention = torch.cat([inputs.attention_mask, torch.ones_like(reply, dtype=torch.bool)], dim=1)
        token_types = self.processor.mm_token_type_ids(input_ids)
        return VLMInputs(input_ids, attention, inputs.pixel_inputs, token_types)

    def _generation_hooks(self) -> dict[str, Any]:
        """``generate`` keyword arguments for :attr:`logits_processors` (none when empty)."""
        if not self.logits_processors:
            return {}
        from transformers import LogitsProcessorList

        return {"logits_processor": LogitsProcessorList(self.logits_processors)}

    def _pad_completion(self, tokens: Tensor) -> Tensor:
        """Right-pad a completion that stopped early (every row hit EOS) to ``[B, L]``."""
        missing = self.num_new_tokens - tokens.shape[1]
        return torch.nn.functional.pad(tokens, (0, missing), value=self.processor.pad_token_id)

    def _actions(self, replies: list[str]) -> list[str]:
        """The env actions of decoded replies, inside the ``Text`` action space.

        Characters outside the space's charset (control characters, U+FFFD from a cut byte
        sequence) are dropped and the text is cut to ``max_length``: the env then judges what is
        left, so a malformed reply is an invalid action, never an out-of-space one.
        """
        actions = [answer_text(r) if self.config.output_format == "answer" else r for r in replies]
        space = self.action_space
        assert isinstance(space, spaces.Text)  # checked in __init__
        charset, length = space.character_set, space.max_length
        return ["".join(char for char in action if char in charset)[:length] for action in actions]

    def _token_stats(self, logits: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Log-prob of ``tokens`` and entropy under ``softmax(logits / T)``. Shapes: [B, L].

        Image-structure tokens get probability 0, exactly as ``generate`` suppresses them.
        """
        scaled = logits.float() / self.config.temperature
        scaled[..., self._suppressed] = -1e9  # as generate's suppress_tokens (finite: 0 * -1e9 = 0)
        log_probs = torch.log_softmax(scaled, dim=-1)
        logprob = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return logprob, entropy

    # --- re-scoring and training -----------------------------------------------------------------
    def evaluate(self, obs: Obs, actions: Any = None, extras: dict[str, Tensor] | None = None) -> Evaluation:
        """Log-prob and entropy of ``extras["tokens"]`` given the stored prompts, with gradient.

        ``actions`` is ignored (text actions are re-scored from their tokens). Images are
        re-processed from ``obs["image"]``; rows run in micro-batches of
        ``eval_micro_batch_size``. Positions after each completion's EOS get 0.

        Returns:
            logprob and entropy. Shapes: [B, L].
        """
        evaluation, _ = self._score_batches(obs, _checked(extras), with_features=False)
        return evaluation

    def evaluate_with_features(
        self, obs: Obs, actions: Any = None, extras: dict[str, Tensor] | None = None
    ) -> tuple[Evaluation, Tensor]:
        """:meth:`evaluate` and :meth:`features` of the stored prompts from the same forward pass.

        Returns:
            the evaluation ([B, L]) and the features, float32. Shape: [B, feature_dim].
        """
        evaluation, features = self._score_batches(obs, _checked(extras), with_features=True)
        assert features is not None
        return evaluation, features

    def features(self, obs: Obs) -> Tensor:
        """The last layer's hidden state at each prompt's final token, with gradient.

        The prompt is built as :meth:`act` builds it (same history), so these equal the features
        :meth:`evaluate_with_features` gives for the step's stored prompt. Shape: [B, feature_dim].
        """
        inputs = self.encode_obs(obs)  # its pixels are dropped: _score_batches encodes per micro-batch
        no_tokens = inputs.input_ids.new_zeros((inputs.input_ids.shape[0], 0))
        extras = {"prompt_ids": inputs.input_ids, "prompt_mask": inputs.attention_mask, "tokens": no_tokens}
        _, features = self._score_batches(obs, extras, with_features=True)
        assert features is not None
        return features

    def _score_batches(
        self, obs: Obs, extras: dict[str, Tensor], with_features: bool
    ) -> tuple[Evaluation, Tensor | None]:
        """:meth:`_score` over micro-batches of ``eval_micro_batch_size`` rows, concatenated."""
        images = observation_images(obs) if OBS_IMAGE in self.config.obs_keys else None
        size, parts = self.config.eval_micro_batch_size, []
        for start in range(0, extras["tokens"].shape[0], size):
            rows = slice(start, start + size)
            pixels = self.processor.encode_images(images[rows]) if images is not None else {}
            prompt_ids, prompt_mask, tokens = (extras[key][rows] for key in EXTRAS_KEYS)
            parts.append(self._score(prompt_ids, prompt_mask, tokens, pixels, with_features))
        logprob, entropy, features = zip(*parts, strict=True)
        evaluation = Evaluation(torch.cat(logprob), torch.cat(entropy))
        return evaluation, torch.cat(features) if with_features else None

    def _score(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        tokens: Tensor,
        pixels: dict[str, Tensor],
        with_features: bool,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """One forward pass over prompt + completion.

        Returns:
            the completion tokens' log-prob and entropy ([B, L]) and, ``with_features``, the last
            layer's hidden state at the final prompt position, float32 ([B, feature_dim]).
        """
        device = self.device
        tokens = tokens.to(device)
        input_ids = torch.cat([prompt_ids.to(device), tokens], dim=1)
        # Attend to every completion position, as generate does (causality hides later ones).
        attention = torch.cat([prompt_mask.to(device), torch.ones_like(tokens, dtype=torch.bool)], dim=1)
        inputs = VLMInputs(input_ids, attention, pixels, self.processor.mm_token_type_ids(input_ids))
        inputs = inputs.to(device, self._dtype)
        length = tokens.shape[1]
        out = self.model(
            **inputs.model_kwargs(),
            use_cache=False,
            logits_to_keep=length + 1,
            output_hidden_states=with_features,  # full length even when only length + 1 logits are kept
        )
        logprob, entropy = self._token_stats(out.logits[:, :-1], tokens)  # position t predicts token t + 1
        keep = completion_mask(tokens, self.processor.eos_token_id)
        # Prompts are left-padded, so the final prompt token is at prompt_len - 1 in every row.
        features = out.hidden_states[-1][:, prompt_ids.shape[1] - 1].float() if with_features else None
        return logprob.masked_fill(~keep, 0.0), entropy.masked_fill(~keep, 0.0), features

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, float]]:
        """Supervised fine-tuning: mean negative log-likelihood of the masked target tokens.

        ``batch`` needs ``obs``, ``extras`` (``prompt_ids``, ``prompt_mask``, ``tokens``, e.g. from
        :meth:`encode_targets`) and ``mask`` ``[B, L]``. Uses the same path as :meth:`evaluate`,
        so it trains the (temperature-scaled) distribution the policy samples from.
        """
        evaluation = self.evaluate(batch.obs, None, batch.extras)
        mask = batch.mask.to(evaluation.logprob.device).float()
        count = mask.sum().clamp(min=1.0)
        loss = -(evaluation.logprob * mask).sum() / count
        entropy = (evaluation.entropy * mask).sum() / count
        return loss, {"train/sft_nll": float(loss.detach()), "train/entropy": float(entropy.detach())}

    def encode_targets(self, obs: Obs, texts: Sequence[str]) -> tuple[dict[str, Tensor], Tensor]:
        """Extras and mask ``[B, L]`` that make target replies look like generated ones (for SFT).

        Each text (e.g. ``"<think>...</think><answer>up</answer>"``) is tokenised, followed by EOS,
        and right-padded or cut to ``max_new_tokens``.
        """
        with torch.no_grad():
            inputs = self.encode_obs(obs)
        tokenizer, eos, pad = (
            self.processor.tokenizer,
            self.processor.eos_token_id,
            self.processor.pad_token_id,
        )
        tokens = torch.full((len(texts), self.num_new_tokens), pad, dtype=torch.long)
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        for i, text in enumerate(texts):
            ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], eos][: self.num_new_tokens]
            tokens[i, : len(ids)] = torch.tensor(ids)
            mask[i, : len(ids)] = True
        extras = {"prompt_ids": inputs.input_ids, "prompt_mask": inputs.attention_mask}
        return {**extras, "tokens": tokens.to(self.device)}, mask.to(self.device)

    # --- saving ---------------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> Path:
        """Omnigym's files plus the Hugging Face model, tokenizer and processor in ``path/hf``.

        ``model.safetensors`` holds the exact state (with LoRA: base weights and adapters,
        unmerged, so training resumes where it stopped); ``hf/`` holds a standalone model with
        any LoRA adapters merged, loadable by any Hugging Face tool. ``config.json`` points
        ``model`` at ``hf/`` (absolute path), and :meth:`from_pretrained` re-points it at the
        loaded directory's ``hf/``, so the original model directory is never needed again.
        """
        path = super().save_pretrained(path)
        hf = path / HF_DIR
        model = copy.deepcopy(self.model).merge_and_unload() if self.config.lora_r > 0 else self.model
        model.save_pretrained(hf)
        if self.processor.processor is not None:
            self.processor.processor.save_pretrained(hf)
        else:
            self.processor.tokenizer.save_pretrained(hf)
            if self.processor.image_processor is not None:  # None for a text-only model
                self.processor.image_processor.save_pretrained(hf)
        meta = json.loads((path / CONFIG_FILE).read_text())
        meta["config"]["model"] = str(hf.resolve())
        (path / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
        return path

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> VLMPolicy:
        """Load a policy written by :meth:`save_pretrained` from ``path`` (its ``hf/`` copy)."""
        path = Path(path)
        for needed in (path / CONFIG_FILE, path / WEIGHTS_FILE, path / HF_DIR):
            if not needed.exists():
                raise FileNotFoundError(f"not a saved VLM policy: {needed} is missing")
        try:
            meta = json.loads((path / CONFIG_FILE).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"corrupt policy config {path / CONFIG_FILE}: {exc}") from exc
        if meta.get("type") != cls.name:
            raise TypeError(f"{path} holds a {meta.get('type')!r} policy, not 'vlm'")
        try:
            config = build_dataclass(
                VLMPolicyConfig, {**meta["config"], "model": str(path / HF_DIR)}, path="policy"
            )
            observation_space = space_from_json(meta["observation_space"])
            action_space = space_from_json(meta["action_space"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"corrupt policy config {path / CONFIG_FILE}: missing or bad {exc}") from exc
        if not isinstance(observation_space, spaces.Dict):
            raise ValueError(f"{path}: a VLM policy's observation space must be a Dict")
        policy = cls(config, observation_space, action_space)
        try:
            policy.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
        except (SafetensorError, OSError, RuntimeError) as exc:
            raise ValueError(f"corrupt or mismatched policy weights {path / WEIGHTS_FILE}: {exc}") from exc
        return policy.to(device)


def _checked(extras: dict[str, Tensor] | None) -> dict[str, Tensor]:
    """``extras`` from :meth:`VLMPolicy.act` (or ``encode_targets``), or a clear error."""
    if extras is None or not set(EXTRAS_KEYS) <= set(extras):
        raise ValueError("VLMPolicy.evaluate needs extras prompt_ids, prompt_mask and tokens (from act)")
    return extras
