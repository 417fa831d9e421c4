"""Datasets of policy rollouts, stored as Minari datasets for imitation and offline RL.

Any registered policy (a scripted expert, a baseline, a trained policy), or a mix of several,
can be rolled out on any env and recorded. Each episode's return, length, success flag and
source policy are stored as its Minari episode metadata, and the per-step success flags as its
``infos``, so a learner can filter or weight demonstrations without replaying them. Privileged
observation keys that an expert reads (``Policy.env_kwargs``) are stripped from what is stored,
so a dataset holds what a learner may see.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, obs_to_torch
from omnigym.platform.evaluate import SUCCESS_KEYS
from omnigym.platform.loggers import TaskProgress, progress
from omnigym.platform.vec_env import make_env, to_env_action

SUCCESS_INFO = "is_success"
"""Key of the success flags in a stored episode's ``infos`` and metadata, whichever of
:data:`~omnigym.platform.evaluate.SUCCESS_KEYS` the env reports."""
MODES = ("deterministic", "stochastic")
"""How a policy of a mix acts: its mode, or sampled (the experts' noise, uniform for random)."""


class HidePrivileged(gym.ObservationWrapper):
    """Removes ``keys`` from Dict observations; the last removed values stay in ``privileged``."""

    def __init__(self, env: gym.Env, keys: list[str]) -> None:
        super().__init__(env)
        assert isinstance(env.observation_space, spaces.Dict)
        self.keys = [key for key in keys if key in env.observation_space.spaces]
        self.observation_space = spaces.Dict(
            {k: s for k, s in env.observation_space.spaces.items() if k not in self.keys}
        )
        self.privileged: dict[str, Any] = {}

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        """The observation without the privileged keys."""
        self.privileged = {key: observation[key] for key in self.keys}
        return {key: value for key, value in observation.items() if key not in self.keys}


@dataclass
class PolicySource:
    """One policy of a dataset and the share of its episodes that the policy records."""

    policy: Policy
    fraction: float = 1.0
    """Share of the episodes, in (0, 1]; the fractions of a mix sum to 1."""
    deterministic: bool = True
    """Act with the policy's mode; False samples (an expert's noise, a random policy's draws)."""
    label: str = ""
    """Name stored with each episode (default: the policy's name and mode)."""

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ValueError(f"a policy's fraction must be in (0, 1], got {self.fraction}")
        if not self.label:
            name = self.policy.name or type(self.policy).__name__
            self.label = name if self.deterministic else f"{name}:stochastic"


@dataclass
class PolicySpec:
    """One entry of a ``--policy`` mix as written: ``SPEC[:MODE][:FRACTION]``."""

    spec: str
    """Registered policy name, saved policy, checkpoint or run dir."""
    mode: str | None = None
    """``deterministic``, ``stochastic`` or None (the command's default)."""
    fraction: float = 1.0


def parse_policy_mix(text: str) -> list[PolicySpec]:
    """Parse ``--policy``: one spec, or a comma-separated mix ``SPEC[:MODE][:FRACTION],...``.

    E.g. ``pusht_expert:0.7,random:0.3`` or ``reach_expert:0.5,reach_expert:stochastic:0.5``.
    A single spec may leave out its fraction; in a mix every entry names one, and they sum to 1.

    Raises:
        ValueError: an empty entry, an unknown mode, a bad fraction or a sum other than 1.
    """
    entries = [part.strip() for part in text.split(",")]
    specs = []
    for entry in entries:
        parts = entry.split(":")
        fraction = None
        if len(parts) > 1 and _is_number(parts[-1]):
            fraction = float(parts.pop())
        mode = parts.pop() if len(parts) > 1 and parts[-1] in MODES else None
        spec = ":".join(parts)
        if not spec:
            raise ValueError(f"--policy {text!r}: an entry names no policy")
        if fraction is None and len(entries) > 1:
            raise ValueError(f"--policy {text!r}: give every policy of a mix its fraction, e.g. {spec}:0.5")
        specs.append(PolicySpec(spec, mode, 1.0 if fraction is None else fraction))
    for s in specs:
        if not 0 < s.fraction <= 1:
            raise ValueError(f"--policy {text!r}: fractions must be in (0, 1], got {s.fraction}")
    total = sum(s.fraction for s in specs)
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ValueError(f"--policy {text!r}: the fractions sum to {total:g}, not 1")
    return specs


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def assign_episodes(fractions: Sequence[float], episodes: int) -> list[int]:
    """The source of each episode: index ``k`` for ``fractions[k]``, deterministic and interleaved.

    Episode ``i`` goes to the source furthest behind its share of the first ``i + 1`` episodes
    (ties to the lower index), so every prefix of the dataset holds each source within about one
    episode of its fraction, and the whole dataset ``round(fraction * episodes)`` up to ties.

    Args:
        fractions: the sources' shares, summing to 1.
        episodes: how many episodes to assign.

    Returns:
        ``[episodes]`` source indices.
    """
    counts = [0] * len(fractions)
    sources = []
    for i in range(episodes):
        k = max(range(len(fractions)), key=lambda j: fractions[j] * (i + 1) - counts[j])
        counts[k] += 1
        sources.append(k)
    return sources


@dataclass
class _Recorded:
    """One recorded episode: Minari's buffer and what is stored as its episode metadata."""

    buffer: Any
    """``minari.data_collector.EpisodeBuffer``."""
    metadata: dict[str, Any]
    """``policy``, ``return``, ``length`` and, when the env reports it, ``is_success``."""


def _record_episode(source: PolicySource, env: HidePrivileged, seed: int) -> _Recorded:
    """One episode: observations T+1, actions, rewards, ends T, success flags T+1 (reset first).

    Sampling is seeded with ``seed`` too (inside a forked torch RNG), so an episode does not
    depend on which episodes were recorded before it.
    """
    from minari.data_collector.episode_buffer import EpisodeBuffer

    policy = source.policy
    policy.reset()
    obs, info = env.reset(seed=seed)
    observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
    infos = [info]
    done = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        while not done:
            full = {**obs, **env.privileged}
            batch = {k: ((v,) if isinstance(v, str) else np.asarray(v)[None]) for k, v in full.items()}
            with torch.no_grad():
                step = policy.act(obs_to_torch(batch), deterministic=source.deterministic)
            raw = (
                step.action.detach().cpu().numpy()
                if isinstance(step.action, torch.Tensor)
                else np.asarray(step.action)
            )
            action = to_env_action(env.action_space, raw[0])
            obs, reward, terminated, truncated, info = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(float(reward))
            terminations.append(bool(terminated))
            truncations.append(bool(truncated))
            infos.append(info)
            done = terminated or truncated
    metadata: dict[str, Any] = {
        "policy": source.label,
        "return": float(np.sum(rewards)),
        "length": len(rewards),
    }
    success_key = next((key for key in SUCCESS_KEYS if key in infos[-1]), None)
    step_infos = {}
    if success_key is not None:
        metadata[SUCCESS_INFO] = bool(infos[-1][success_key])
        if all(success_key in i for i in infos):
            step_infos[SUCCESS_INFO] = np.array([bool(i[success_key]) for i in infos])
    buffer = EpisodeBuffer(
        seed=seed,
        observations=_stack_observations(observations, env.observation_space),
        # Text actions as a list of str, like Text observations (h5py cannot store a ``<U`` array).
        actions=[str(a) for a in actions] if isinstance(env.action_space, spaces.Text) else np.stack(actions),
        rewards=rewards,
        terminations=terminations,
        truncations=truncations,
        infos=step_infos,
    )
    return _Recorded(buffer, metadata)


def _stack_observations(observations: list[dict[str, Any]], space: spaces.Space) -> dict[str, Any]:
    """``key -> [T+1, ...]`` arrays; ``Text`` keys as lists of ``str``.

    h5py stores a list of Python strings, but has no conversion for a NumPy ``<U`` array.
    """
    assert isinstance(space, spaces.Dict)
    return {
        key: [str(o[key]) for o in observations]
        if isinstance(space[key], spaces.Text)
        else np.stack([o[key] for o in observations])
        for key in observations[0]
    }


@dataclass
class DatasetSummary:
    """What :func:`collect_dataset` recorded."""

    dataset_id: str
    path: str
    episodes: int
    steps: int
    mean_return: float
    success_rate: float | None = None
    """Fraction of episodes whose last step reported success; None if the env reports none."""
    episodes_per_policy: dict[str, int] = field(default_factory=dict)
    """Episodes recorded by each source, by label."""


def collect_dataset(
    policy: Policy | Sequence[PolicySource],
    env_id: str,
    dataset_id: str,
    *,
    episodes: int = 10,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    deterministic: bool = True,
    description: str | None = None,
    jpeg_images: bool = False,
    steps: int | None = None,
) -> DatasetSummary:
    """Roll a policy, or a mix of policies, out and save the episodes as Minari dataset ``dataset_id``.

    Episode ``i`` is seeded ``seed + i`` (the env's reset and the policy's sampling); with a mix
    it is recorded by source :func:`assign_episodes` picks. Each episode's metadata
    (``dataset.storage.get_episode_metadata(dataset.episode_indices)``) holds ``policy`` (the
    source's label), ``return``, ``length`` and ``is_success`` (from the last step's info, when
    the env reports success); its ``infos["is_success"]`` the flag of every step (reset first).
    ``Text`` observations and actions are stored as strings. Datasets live under ``$MINARI_DATASETS_PATH``
    (default ``~/.minari/datasets``).

    Args:
        policy: one policy, or the sources of a mix (fractions summing to 1).
        env_id: the Gymnasium id to roll out on.
        dataset_id: the Minari id to write, e.g. ``omnigym/reach-expert-v0``.
        episodes: how many episodes.
        seed: episode ``i`` uses ``seed + i``.
        env_kwargs: keyword arguments for the env, over those the policies ask for.
        deterministic: how a single ``policy`` acts (a mix's sources say it themselves).
        description: the dataset's description (default: counts, policies and env).
        jpeg_images: store image observations JPEG-encoded (Minari's default: about 10x smaller
            but lossy); by default they are stored exactly as the env rendered them.
        steps: record whole episodes until at least this many steps (D4RL-style datasets are
            sized in transitions); ``episodes`` is then ignored. Needs a single policy.

    Raises:
        ImportError: minari is not installed (``pip install omnigym[offline]``).
        ValueError: a bad count or mix, policies asking for different env options, or a dataset
            with this id exists already.
    """
    try:
        from minari.storage import get_dataset_path
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("collecting datasets needs minari: pip install 'omnigym[offline]'") from exc
    sources = _checked_sources(policy, deterministic, episodes, steps)
    path = get_dataset_path(dataset_id)
    if path.exists():
        raise ValueError(f"Minari dataset {dataset_id!r} exists already; delete it or pick another id")
    kwargs = _merged_env_kwargs([s.policy for s in sources], env_kwargs or {})
    env = HidePrivileged(make_env(env_id, **kwargs), list(kwargs.get("privileged", [])))
    assignment = assign_episodes([s.fraction for s in sources], episodes)
    labels = [s.label for s in sources]
    try:
        recorded = _record_episodes(sources, env, env_id, assignment, seed, steps)
        if steps is not None:
            episodes, assignment = len(recorded), [0] * len(recorded)
        mix = ", ".join(f"{s.label} {s.fraction:g}" for s in sources)
        description = description or f"{episodes} episodes of {mix} on {env_id}"
        try:
            _create_minari_dataset(dataset_id, env, recorded, ",".join(labels), description, jpeg_images)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)  # a half-written dataset would block its id
            raise
    finally:
        env.close()
    successes = [r.metadata[SUCCESS_INFO] for r in recorded if SUCCESS_INFO in r.metadata]
    return DatasetSummary(
        dataset_id=dataset_id,
        path=str(path),
        episodes=episodes,
        steps=sum(r.metadata["length"] for r in recorded),
        mean_return=float(np.mean([r.metadata["return"] for r in recorded])),
        success_rate=float(np.mean(successes)) if len(successes) == episodes else None,
        episodes_per_policy={label: sum(labels[k] == label for k in assignment) for label in labels},
    )


def _checked_sources(
    policy: Policy | Sequence[PolicySource], deterministic: bool, episodes: int, steps: int | None
) -> list[PolicySource]:
    """The sources :func:`collect_dataset` records with, after checking its counts and mix."""
    sources = [PolicySource(policy, 1.0, deterministic)] if isinstance(policy, Policy) else list(policy)
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if steps is not None and (steps < 1 or len(sources) != 1):
        raise ValueError("collecting by steps needs steps >= 1 and a single policy")
    if not sources or not math.isclose(sum(s.fraction for s in sources), 1.0, abs_tol=1e-6):
        raise ValueError("the policies' fractions must sum to 1")
    return sources


def _record_episodes(
    sources: Sequence[PolicySource],
    env: HidePrivileged,
    env_id: str,
    assignment: Sequence[int],
    seed: int,
    steps: int | None,
) -> list[_Recorded]:
    """Episode ``i`` recorded by ``sources[assignment[i]]`` with seed ``seed + i``.

    With ``steps``, whole episodes of the first source until at least that many steps instead.
    """
    if steps is None:
        episodes_shown = progress(enumerate(assignment), len(assignment), f"collect {env_id}", unit="episode")
        return [_record_episode(sources[k], env, seed + i) for i, k in episodes_shown]
    recorded: list[_Recorded] = []
    with TaskProgress(steps, f"collect {env_id}", unit="step") as bar:
        while (done := sum(r.metadata["length"] for r in recorded)) < steps:
            recorded.append(_record_episode(sources[0], env, seed + len(recorded)))
            bar.update(min(recorded[-1].metadata["length"], steps - done))
    return recorded


def _create_minari_dataset(
    dataset_id: str,
    env: HidePrivileged,
    recorded: Sequence[_Recorded],
    algorithm_name: str,
    description: str,
    jpeg_images: bool,
) -> None:
    """Write ``recorded`` as Minari dataset ``dataset_id``, each episode's metadata included."""
    import minari

    spec = env.env.spec  # the made env's, without this wrapper
    if spec is not None:  # a user re-making the env from the dataset gets no privileged keys
        spec = dataclasses.replace(spec, kwargs={k: v for k, v in spec.kwargs.items() if k != "privileged"})
    dataset = minari.create_dataset_from_buffers(
        dataset_id=dataset_id,
        buffer=[r.buffer for r in recorded],
        env=spec,
        eval_env=spec,
        observation_space=env.observation_space,
        action_space=env.action_space,
        algorithm_name=algorithm_name,
        author="omnigym",
        code_permalink="https://github.com/omnigym/omnigym",
        description=description,
        jpeg_encoding=jpeg_images,
    )
    dataset.storage.update_episode_metadata([r.metadata for r in recorded], range(len(recorded)))


def write_episodes_dataset(
    episodes: Sequence[dict[str, Any]],
    env_id: str,
    dataset_id: str,
    *,
    label: str,
    description: str,
    env_kwargs: dict[str, Any] | None = None,
    jpeg_images: bool = False,
) -> DatasetSummary:
    """Save ready-made episodes (e.g. a training run's replay buffer) as Minari dataset ``dataset_id``.

    Each episode is a dict in Minari's layout: ``observations`` (``key -> [T+1, ...]``),
    ``actions`` ``[T, ...]``, ``rewards``, ``terminations``, ``truncations`` ``[T]`` and
    optionally its reset ``seed``. Episode
    metadata holds ``policy`` (``label``), ``return`` and ``length``, as :func:`collect_dataset` writes.
    Images are stored exactly unless ``jpeg_images`` (Minari's own default is JPEG).

    Raises:
        ValueError: no episodes, or a dataset with this id exists already.
    """
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.storage import get_dataset_path

    if not episodes:
        raise ValueError(f"{dataset_id}: no episodes to write")
    path = get_dataset_path(dataset_id)
    if path.exists():
        raise ValueError(f"Minari dataset {dataset_id!r} exists already; delete it or pick another id")
    env = make_env(env_id, **(env_kwargs or {}))
    buffers = [
        EpisodeBuffer(
            seed=e.get("seed"),
            observations=e["observations"],
            actions=e["actions"],
            rewards=list(map(float, e["rewards"])),
            terminations=list(map(bool, e["terminations"])),
            truncations=list(map(bool, e["truncations"])),
        )
        for e in episodes
    ]
    metadata = [
        {"policy": label, "return": float(np.sum(e["rewards"])), "length": len(e["rewards"])}
        for e in episodes
    ]
    try:
        dataset = minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=buffers,
            env=env.spec,
            eval_env=env.spec,
            observation_space=env.observation_space,
            action_space=env.action_space,
            algorithm_name=label,
            author="omnigym",
            code_permalink="https://github.com/omnigym/omnigym",
            description=description,
            jpeg_encoding=jpeg_images,
        )
        dataset.storage.update_episode_metadata(metadata, range(len(metadata)))
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # a half-written dataset would block its id
        raise
    finally:
        env.close()
    return DatasetSummary(
        dataset_id=dataset_id,
        path=str(path),
        episodes=len(metadata),
        steps=sum(len(e["rewards"]) for e in episodes),
        mean_return=float(np.mean([m["return"] for m in metadata])),
        episodes_per_policy={label: len(metadata)},
    )


def _merged_env_kwargs(policies: Sequence[Policy], env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The env options all ``policies`` ask for (their privileged keys joined), then ``env_kwargs``.

    Raises:
        ValueError: two policies ask for different values of one option.
    """
    merged: dict[str, Any] = {}
    privileged: list[str] = []
    for policy in policies:
        for key, value in policy.env_kwargs.items():
            if key == "privileged":
                privileged += [k for k in value if k not in privileged]
            elif key in merged and merged[key] != value:
                raise ValueError(f"policies ask for env option {key} = {merged[key]!r} and {value!r}")
            else:
                merged[key] = value
    if privileged:
        merged["privileged"] = privileged
    return {**merged, **env_kwargs}


@dataclass
class DatasetSteps:
    """Every step of a Minari dataset, flattened over episodes, for supervised learning.

    Attributes:
        obs: ``key -> [N, ...]`` arrays (``Text`` keys: lists of ``N`` strings), the observation
            each action was taken in (episodes' final observations dropped).
        actions: ``[N, ...]`` array, or ``N`` strings for ``Text`` actions.
        episode_index: the episode each step came from. Shape: [N].
    """

    obs: dict[str, Any]
    actions: Any
    episode_index: np.ndarray

    def __len__(self) -> int:
        return len(self.episode_index)


def load_dataset_steps(dataset_id: str, *, successful_only: bool = False) -> DatasetSteps:
    """The (observation, action) pairs of Minari dataset ``dataset_id`` (as :func:`collect_dataset` writes).

    Args:
        dataset_id: a dataset under ``$MINARI_DATASETS_PATH``.
        successful_only: keep only episodes whose metadata says ``is_success`` (imitation of the
            demonstrations that worked).

    Raises:
        FileNotFoundError: no such dataset.
        ValueError: the dataset's observations are not a Dict, or no episode is left.
    """
    import minari
    from minari.storage import get_dataset_path

    path = get_dataset_path(dataset_id)
    if not path.exists():
        raise FileNotFoundError(f"no Minari dataset {dataset_id!r} under {path.parent}")
    dataset = minari.load_dataset(dataset_id)
    if not isinstance(dataset.observation_space, spaces.Dict):
        raise ValueError(
            f"{dataset_id}: omnigym datasets have Dict observations, got {dataset.observation_space}"
        )
    text_keys = {k for k, s in dataset.observation_space.spaces.items() if isinstance(s, spaces.Text)}
    metadata = dataset.storage.get_episode_metadata(dataset.episode_indices)
    obs: dict[str, list[Any]] = {key: [] for key in dataset.observation_space.spaces}
    actions: list[Any] = []
    index: list[np.ndarray] = []
    for meta, episode in zip(metadata, dataset.iterate_episodes(), strict=True):
        if successful_only and not meta.get(SUCCESS_INFO, False):
            continue
        steps = len(episode.rewards)
        for key in obs:
            values = episode.observations[key][:steps]
            obs[key].extend([str(v) for v in values] if key in text_keys else [np.asarray(values)])
        text_actions = isinstance(dataset.action_space, spaces.Text)
        actions.extend([str(a) for a in episode.actions] if text_actions else [np.asarray(episode.actions)])
        index.append(np.full(steps, episode.id))
    if not index:
        raise ValueError(f"{dataset_id}: no episodes to learn from (successful_only={successful_only})")
    return DatasetSteps(
        obs={k: v if k in text_keys else np.concatenate(v) for k, v in obs.items()},
        actions=actions if isinstance(dataset.action_space, spaces.Text) else np.concatenate(actions),
        episode_index=np.concatenate(index),
    )
