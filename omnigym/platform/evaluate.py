"""Evaluate a policy: run seeded episodes in a batch of plain envs and summarise the results.

Episode ``i`` is always reset with seed ``seed + i`` and results are stored by episode index, so
they are reproducible and do not depend on how many episodes run side by side (``num_envs``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from omnigym.core.policy import Policy
from omnigym.core.vector import TorchVectorEnv
from omnigym.platform.episodes.format import KIND_IMAGE, EpisodeSteps, RecordingWriter, value_kind
from omnigym.platform.stats import summarize
from omnigym.platform.vec_env import make_env, to_env_action, to_torch_env_action


class PolicyLike(Protocol):
    """What evaluation needs of a :class:`~omnigym.core.policy.Policy` (``reset`` is optional)."""

    def predict(self, obs: dict[str, np.ndarray], *, deterministic: bool = True) -> Any:
        """Actions ``[B, ...]`` for observations ``key -> [B, ...]``."""
        ...


ActionFn = Callable[[dict[str, np.ndarray]], Any]
"""A scripted controller: observation batch ``key -> [B, ...]`` to actions ``[B, ...]``."""

SUCCESS_KEYS = ("success", "is_success")
"""Info keys read as task success, in order of preference."""


@dataclass
class EvalResult:
    """The outcome of :func:`evaluate_policy`, one entry per episode in seed order."""

    env_id: str
    """The Gymnasium id evaluated."""
    returns: list[float] = field(default_factory=list)
    """Undiscounted return of each episode."""
    lengths: list[int] = field(default_factory=list)
    """Steps in each episode."""
    seeds: list[int] = field(default_factory=list)
    """The reset seed of each episode."""
    metrics: dict[str, list[float]] = field(default_factory=dict)
    """Per-episode numeric ``info`` values at the final step, ``reward/<name>`` sums of
    ``info["reward_components"]`` and, for envs that report ``info["action_valid"]``, the count of
    ``invalid_actions``; NaN for episodes whose final info lacked the key."""
    video_path: str | None = None
    """The MP4 of the first episode, when videos were recorded."""
    video_paths: list[str] = field(default_factory=list)
    """One MP4 per recorded episode, in episode order (``video_path`` is the first)."""

    def summary(self) -> dict[str, float]:
        """Aggregate the episodes into one flat dict of numbers.

        Returns:
            ``return_{mean,std,min,max,median,iqm}`` (std with ddof=0), ``length_mean``,
            ``episodes``, ``success_rate`` when a ``success`` or ``is_success`` metric exists
            (fraction of episodes where it is non-zero; not reported counts as failure) and
            ``<metric>_mean`` for every other metric (episodes without it are ignored).
        """
        out = {f"return_{name}": value for name, value in summarize(self.returns).items()}
        out["length_mean"] = float(np.mean(self.lengths))
        out["episodes"] = float(len(self.returns))
        success_key = next((key for key in SUCCESS_KEYS if key in self.metrics), None)
        for name, values in self.metrics.items():
            array = np.asarray(values, dtype=np.float64)
            if name == success_key:
                # NaN (not reported) is not a success, although bool(nan) is True.
                out["success_rate"] = float(np.mean(np.nan_to_num(array, nan=0.0) != 0))
            elif np.isfinite(array).any():
                out[f"{name}_mean"] = float(np.nanmean(array))
        return out


@dataclass
class _Episode:
    """An episode in progress in one slot."""

    index: int
    seed: int
    env: gym.Env
    episode_return: float = 0.0
    length: int = 0
    reward_components: dict[str, float] = field(default_factory=dict)
    invalid_actions: int | None = None
    """Steps whose ``info["action_valid"]`` was False (None: the env does not report it)."""
    frames: list[np.ndarray] | None = None
    steps: EpisodeSteps | None = None
    """What the recording keeps of this episode (None: not recording)."""


@dataclass
class _Record:
    """A finished episode."""

    episode_return: float
    length: int
    metrics: dict[str, float]


class _EpisodeRunner:
    """Runs ``episodes`` seeded episodes in ``num_slots`` plain envs, refilling slots as they finish.

    Every slot keeps a plain env and, for the first ``len(video_paths)`` episodes, a separate
    ``rgb_array`` env; episode ``i``'s frames (the reset frame and one per step, so
    ``length + 1``) are written to ``video_paths[i]`` as soon as it ends. A slot with no episode
    left keeps its last observation, so the batch always has ``num_slots`` rows and a stateful
    policy's row ``k`` is always slot ``k``.
    """

    def __init__(
        self,
        env_id: str,
        *,
        episodes: int,
        seed: int,
        num_slots: int,
        video_paths: list[Path],
        make_kwargs: dict[str, Any],
        recording: RecordingWriter | None = None,
    ) -> None:
        self.env_id = env_id
        self.episodes = episodes
        self.seed = seed
        self.video_paths = video_paths
        self.make_kwargs = make_kwargs
        self.next_index = 0
        self.envs: dict[tuple[int, bool], gym.Env] = {}  # (slot, renders) -> env
        self.running: list[_Episode | None] = [None] * num_slots
        self.obs: list[dict[str, Any]] = [{} for _ in range(num_slots)]
        self.records: dict[int, _Record] = {}
        self.render_fps = 30
        self.recording = recording
        self.record_frames: bool | None = None  # decided on the first reset: envs without an image obs

    @property
    def num_slots(self) -> int:
        """Episodes run side by side (the policy's batch size)."""
        return len(self.running)

    def active(self) -> bool:
        """Whether any slot still has an episode running."""
        return any(episode is not None for episode in self.running)

    def start(self, slot: int) -> bool:
        """Start the next episode in ``slot``; False (slot goes idle) when none is left."""
        if self.next_index >= self.episodes:
            self.running[slot] = None
            return False
        index, self.next_index = self.next_index, self.next_index + 1
        if self.recording is not None and self.record_frames is None:
            self.record_frames = self._needs_frames()
        renders = index < len(self.video_paths) or bool(self.record_frames)
        env = self._env(slot, renders)
        episode = _Episode(index=index, seed=self.seed + index, env=env, frames=[] if renders else None)
        if self.recording is not None:
            episode.steps = EpisodeSteps()
        self.obs[slot], _ = env.reset(seed=episode.seed)
        self._record_frame(episode)
        self._record_observation(episode, self.obs[slot])
        self.running[slot] = episode
        return True

    def batch_obs(self) -> dict[str, np.ndarray]:
        """The slots' observations stacked into a batch ``key -> [num_slots, ...]``."""
        return {key: _stack([obs[key] for obs in self.obs]) for key in self.obs[0]}

    def step(self, actions: Any) -> np.ndarray:
        """Step every running slot with its row of ``actions``.

        Returns:
            Which slots started a new episode. Shape: [num_slots], bool.
        """
        if len(actions) != self.num_slots:
            raise ValueError(f"policy returned {len(actions)} actions for a batch of {self.num_slots}")
        started = np.zeros(self.num_slots, dtype=bool)
        for slot, episode in enumerate(self.running):
            if episode is None:
                continue
            action = self._env_action(episode, actions[slot])
            obs, reward, terminated, truncated, info = episode.env.step(action)
            self.obs[slot] = obs
            episode.episode_return += float(reward)
            episode.length += 1
            _add_reward_components(episode.reward_components, info)
            if "action_valid" in info:
                episode.invalid_actions = (episode.invalid_actions or 0) + int(not info["action_valid"])
            self._record_frame(episode)
            if episode.steps is not None:
                episode.steps.add_step(action, float(reward), terminated, truncated, info)
                self._record_observation(episode, obs)
            if terminated or truncated:
                self.records[episode.index] = _Record(
                    episode.episode_return, episode.length, _final_metrics(info, episode)
                )
                if episode.frames is not None and episode.index < len(self.video_paths):
                    self._write_video(episode.index, episode.frames)
                if self.recording is not None and episode.steps is not None:
                    self.recording.write(
                        episode.steps, seed=episode.seed, metrics=self.records[episode.index].metrics,
                        index=episode.index,
                    )  # fmt: skip
                started[slot] = self.start(slot)
        return started

    def result(self) -> EvalResult:
        """The finished episodes as an :class:`EvalResult`, with the videos written."""
        records = [self.records[index] for index in range(self.episodes)]
        names = list(dict.fromkeys(name for record in records for name in record.metrics))
        videos = [str(path) for path in self.video_paths]
        return EvalResult(
            env_id=self.env_id,
            returns=[record.episode_return for record in records],
            lengths=[record.length for record in records],
            seeds=[self.seed + index for index in range(self.episodes)],
            metrics={name: [record.metrics.get(name, float("nan")) for record in records] for name in names},
            video_path=videos[0] if videos else None,
            video_paths=videos,
        )

    def close(self) -> None:
        """Close every env made."""
        for env in self.envs.values():
            env.close()

    def _env(self, slot: int, renders: bool) -> gym.Env:
        if (slot, renders) not in self.envs:
            env = make_env(self.env_id, render_mode="rgb_array" if renders else None, **self.make_kwargs)
            self.envs[slot, renders] = env
            if renders:
                self.render_fps = int(env.metadata.get("render_fps") or 30)
        return self.envs[slot, renders]

    def _env_action(self, episode: _Episode, action: Any) -> Any:
        where = f"{self.env_id}, episode {episode.index} (seed {episode.seed}), step {episode.length}"
        if isinstance(action, str):  # text actions pass as they are
            return action
        raw = np.asarray(action)
        # Checked here as well: to_env_action only checks Box spaces, and NaN cast to an index is garbage.
        if raw.dtype.kind in "fc" and not np.all(np.isfinite(raw)):
            raise ValueError(f"{where}: policy produced a non-finite action (NaN or inf): {raw}")
        try:
            return to_env_action(episode.env.action_space, raw)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc

    def _needs_frames(self) -> bool:
        """Whether recorded episodes need rendered frames: the observation has no image to show."""
        env = self._env(0, False)
        obs, _ = env.reset(seed=self.seed)
        values = obs.values() if isinstance(obs, dict) else [obs]
        if any(not isinstance(v, str) and value_kind(v) == KIND_IMAGE for v in values):
            return False
        return "rgb_array" in (env.metadata.get("render_modes") or [])

    def _record_observation(self, episode: _Episode, obs: Any) -> None:
        if episode.steps is not None:
            frame = episode.frames[-1] if self.record_frames and episode.frames else None
            episode.steps.add_observation(obs, frame)
            if episode.frames is not None and episode.index >= len(self.video_paths):
                episode.frames.clear()  # kept only for the recording, which has it now

    def _record_frame(self, episode: _Episode) -> None:
        if episode.frames is None:
            return
        frame = episode.env.render()
        if frame is None:
            raise ValueError(
                f"{self.env_id} cannot render: render() returned None with render_mode='rgb_array', "
                "so no video can be recorded (pass video_path=None)"
            )
        episode.frames.append(np.asarray(frame))

    def _write_video(self, index: int, frames: list[np.ndarray]) -> None:
        """Write episode ``index``'s frames to its MP4 (the frames are dropped afterwards)."""
        _write_video(frames, self.video_paths[index], self.render_fps)


def _stack(values: list[Any]) -> np.ndarray:
    """Stack one observation key over slots; text and other non-arrays become an object array."""
    if all(isinstance(value, (np.ndarray, np.generic, int, float, bool)) for value in values):
        return np.stack([np.asarray(value) for value in values])
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _numeric_scalar(value: Any) -> float | None:
    """``value`` as a float when it is a numeric scalar (bool, int, float, NumPy scalar, 0-d array)."""
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return float(value)
    return None


def _add_reward_components(sums: dict[str, float], info: dict[str, Any]) -> None:
    """Add this step's ``info["reward_components"]`` (name -> float) to the episode's ``sums``."""
    for name, value in (info.get("reward_components") or {}).items():
        number = _numeric_scalar(value)
        if number is not None:
            sums[name] = sums.get(name, 0.0) + number


def _final_metrics(info: dict[str, Any], episode: _Episode) -> dict[str, float]:
    """Numeric scalars of the final step's ``info`` and the episode's sums.

    The sums: ``reward/<name>`` per reward component and, where reported, ``invalid_actions``.
    """
    metrics = {key: number for key, value in info.items() if (number := _numeric_scalar(value)) is not None}
    metrics.update({f"reward/{name}": total for name, total in episode.reward_components.items()})
    if episode.invalid_actions is not None:
        metrics["invalid_actions"] = float(episode.invalid_actions)
    return metrics


def _action_fn(policy: PolicyLike | ActionFn, deterministic: bool) -> ActionFn:
    """A function from an observation batch to actions, for a Policy or a plain callable."""
    predict = getattr(policy, "predict", None)
    if predict is not None:
        return lambda obs: predict(obs, deterministic=deterministic)
    if not callable(policy):
        raise TypeError(f"policy must have .predict or be callable, got {type(policy).__name__}")
    return policy


def _as_batch(actions: Any) -> Any:
    """Actions as something indexable by slot (lists of text actions stay lists)."""
    return actions if isinstance(actions, (list, tuple)) else np.asarray(actions)


def evaluate_policy(
    policy: PolicyLike | ActionFn,
    env_id: str,
    *,
    episodes: int = 10,
    seed: int = 0,
    deterministic: bool = True,
    num_envs: int = 8,
    env_kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    video_path: str | Path | None = None,
    video_episodes: int = 1,
    record_dir: str | Path | None = None,
    agent_name: str = "",
) -> EvalResult:
    """Run ``episodes`` episodes of ``policy`` on ``env_id`` and collect returns and metrics.

    Up to ``num_envs`` episodes run side by side, one ``policy.predict`` call per step on the
    stacked observations ``key -> [num_slots, ...]``; a slot that finishes takes the next seed.
    ``policy.reset()`` is called once at the start and ``policy.reset(done_mask)`` (bool
    ``[num_slots]``) whenever slots start a new episode. Slots with no episode left keep feeding
    their last observation (their actions are ignored), so batch row ``k`` is always slot ``k``.

    Results do not depend on ``num_envs`` for deterministic policies; a stochastic policy's
    random draws do depend on the batch layout.

    Args:
        policy: a :class:`~omnigym.core.policy.Policy` (anything with ``predict``) or a callable
            ``obs_batch -> actions [B, ...]`` such as a scripted controller.
        env_id: Gymnasium id, made with :func:`~omnigym.platform.vec_env.make_env`.
        episodes: episodes to run; episode ``i`` is reset with seed ``seed + i``.
        seed: seed of the first episode.
        deterministic: passed to ``policy.predict``.
        num_envs: most episodes run at once.
        env_kwargs: keyword arguments for ``make_env``.
        max_episode_steps: overrides the env's time limit.
        video_path: record the first ``video_episodes`` episodes, each whole (the reset frame and
            one frame per step) in its own MP4: this path for a single episode, else
            ``<stem>-episode<i>.mp4`` beside it for episode ``i`` (seed ``seed + i``); see
            :func:`video_paths`. The env must render ``rgb_array`` frames.
        video_episodes: how many of the first episodes to record (at most ``episodes``).
        record_dir: write every episode, step by step, as an episode recording in this new
            directory (``docs/episodes.md``; ``omnigym view`` replays it). Envs whose
            observation holds no image are recorded with their rendered frames.
        agent_name: who acts, as the recording names it.

    Returns:
        The per-episode results, in seed order; see :meth:`EvalResult.summary`.

    Raises:
        ValueError: on bad counts, a non-finite action (naming env, episode and step), or when a
            video is asked for and the env cannot render ``rgb_array`` frames.
    """
    if episodes < 1 or num_envs < 1:
        raise ValueError(f"episodes and num_envs must be >= 1, got {episodes} and {num_envs}")
    if video_path is not None and video_episodes < 1:
        raise ValueError(f"video_episodes must be >= 1 when video_path is given, got {video_episodes}")
    act = _action_fn(policy, deterministic)
    reset = getattr(policy, "reset", None)
    make_kwargs = {
        **getattr(policy, "env_kwargs", {}),
        **(env_kwargs or {}),
        "max_episode_steps": max_episode_steps,
    }
    recording = None
    if record_dir is not None:
        recording = RecordingWriter(
            record_dir, env_id=env_id, env_kwargs={k: v for k, v in make_kwargs.items() if v is not None},
            agent=agent_name or type(policy).__name__, source="eval",
        )  # fmt: skip
    runner = _EpisodeRunner(
        env_id,
        episodes=episodes,
        seed=seed,
        num_slots=min(num_envs, episodes),
        video_paths=video_paths(video_path, min(video_episodes, episodes)) if video_path is not None else [],
        make_kwargs=make_kwargs,
        recording=recording,
    )
    module = policy if isinstance(policy, torch.nn.Module) else None
    was_training = module is not None and module.training
    if module is not None:
        module.eval()  # no dropout / batch-norm updates while evaluating
    try:
        return _run_episodes(runner, act, reset)
    finally:
        runner.close()
        if module is not None and was_training:
            module.train()


def _run_episodes(runner: _EpisodeRunner, act: ActionFn, reset: Callable[..., Any] | None) -> EvalResult:
    """Drive ``runner`` until every episode has finished, resetting the policy's finished slots."""
    if reset is not None:
        reset()
    for slot in range(runner.num_slots):
        runner.start(slot)
    while runner.active():
        started = runner.step(_as_batch(act(runner.batch_obs())))
        if reset is not None and started.any():
            reset(torch.from_numpy(started))
    return runner.result()


def evaluate_torch_env(
    policy: Policy, envs: TorchVectorEnv, *, episodes: int = 10, seed: int = 0, deterministic: bool = True
) -> EvalResult:
    """Run ``episodes`` episodes of ``policy`` on a batched torch env (an Isaac Lab task).

    Such an env cannot be made twice in one process, so evaluation runs on the given env and
    resets it: a trainer must reset its collector afterwards. The batch is reset once with
    ``seed``; env ``n``'s ``k``-th episode is episode ``k * N + n``, so the result does not
    favour short episodes. Metrics come from ``info["final_info"]``.

    Returns:
        The episodes in that order; ``seeds`` holds the batch's seed for each.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    N, device = envs.num_envs, envs.device
    wanted = torch.tensor([len(range(n, episodes, N)) for n in range(N)], device=device)
    done_count = torch.zeros(N, dtype=torch.int64, device=device)
    episode_return = torch.zeros(N, device=device)
    episode_length = torch.zeros(N, dtype=torch.int64, device=device)
    records: dict[int, _Record] = {}
    was_training = policy.training
    policy.eval()
    obs, _ = envs.reset(seed=seed)
    policy.reset()
    try:
        while bool((done_count < wanted).any()):
            with torch.inference_mode():
                action = policy.act(
                    {k: v.to(policy.device) for k, v in obs.items()}, deterministic=deterministic
                ).action
            obs, reward, terminated, truncated, info = envs.step(
                to_torch_env_action(envs.single_action_space, action, device)
            )
            episode_return += reward
            episode_length += 1
            done = terminated | truncated
            if bool(done.any()):
                for n in done.nonzero().squeeze(-1).tolist():
                    if done_count[n] < wanted[n]:
                        metrics = {k: float(v[n]) for k, v in (info.get("final_info") or {}).items()}
                        index = int(done_count[n]) * N + n
                        records[index] = _Record(float(episode_return[n]), int(episode_length[n]), metrics)
                episode_return = torch.where(done, 0.0, episode_return)
                episode_length = torch.where(done, 0, episode_length)
                done_count += done.long()
                policy.reset(done.to(policy.device))
    finally:
        policy.train(was_training)
    ordered = [records[i] for i in range(episodes)]
    names = list(dict.fromkeys(name for record in ordered for name in record.metrics))
    return EvalResult(
        env_id=envs.spec.id if envs.spec else type(envs).__name__,
        returns=[r.episode_return for r in ordered],
        lengths=[r.length for r in ordered],
        seeds=[seed] * episodes,
        metrics={name: [r.metrics.get(name, float("nan")) for r in ordered] for name in names},
    )


def video_paths(video_path: str | Path, episodes: int) -> list[Path]:
    """The MP4 of each of the first ``episodes`` recorded episodes.

    One episode is written to ``video_path`` itself; more go beside it as
    ``<stem>-episode<i>.mp4`` (``i`` from 0, the episode's seed offset), so every file holds one
    whole episode.
    """
    path = Path(video_path)
    if episodes == 1:
        return [path]
    return [path.with_name(f"{path.stem}-episode{i}{path.suffix or '.mp4'}") for i in range(episodes)]


def _write_video(frames: list[np.ndarray], path: Path, fps: int) -> Path:
    from omnigym.platform.loggers import write_video

    return write_video(frames, path, fps=fps)


def format_summary(summary: Mapping[str, float | str]) -> str:
    """A two-column plain-text table of a summary, one metric per line."""
    if not summary:
        return "(no results)"
    width = max(len(name) for name in summary)
    return "\n".join(f"{name:<{width}}  {_format_value(value)}" for name, value in summary.items())


def _format_value(value: float | str) -> str:
    if isinstance(value, str):
        return value
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"
