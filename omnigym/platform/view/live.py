"""Live sessions: an env (and optionally a policy) made and stepped in the server, one step per request.

A session with a policy steps it on the page's play/step buttons; one without is played by a
person, whose action the page sends: typed text for text-action envs (GUI, text games), a key or
button for ``Discrete``, numbers or JSON for ``Box``. Sessions live in server memory keyed by an id
and are closed (with their env) when the server stops or too many are open.

Every mistake a user can make (unknown env id, a policy that does not fit the env, a malformed
action) is a :class:`LiveError` whose message the page shows as one line.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.platform.episodes.format import KIND_IMAGE, encode_png, value_kind
from omnigym.platform.view.replay import NotFoundError, step_view

MAX_SESSIONS = 8
"""Open sessions at most; opening one more closes the least recently used."""


class LiveError(ValueError):
    """A live-session request that cannot be done; the message is one line for the page."""


class LiveSession:
    """One env (and policy, or a person) being stepped from the page.

    Attributes:
        id: the key the page addresses the session by.
        policy_name: the ``--policy`` spec acting, or ``""`` when a person plays.
        seed: the current episode's reset seed (each reset without a seed takes the next).
    """

    def __init__(
        self, session_id: str, env_id: str, env: gym.Env, policy: Any, policy_name: str, seed: int
    ) -> None:
        self.id, self.env_id, self.env = session_id, env_id, env
        self.policy, self.policy_name = policy, policy_name
        self.seed = seed
        self.lock = threading.Lock()
        self._version = 0  # a fresh image URL per observation, so the browser never shows a cached one
        self._obs: dict[str, Any] = {}
        self._frame: np.ndarray | None = None
        self._last: dict[str, Any] = {}
        self._t, self._return, self._done = 0, 0.0, False

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        """Start an episode (``seed``, else the seed after the last one) and return its first step's view."""
        with self.lock:
            self.seed = self.seed + 1 if seed is None else int(seed)
            obs, _ = self.env.reset(seed=self.seed)
            if hasattr(self.policy, "reset"):
                self.policy.reset()
            self._t, self._return, self._done, self._last = 0, 0.0, False, {}
            self._observe(obs)
            return self._view()

    def step(self, action: Any = None) -> dict[str, Any]:
        """One env step with the policy's action, or ``action`` (the person's) when there is no policy.

        Raises:
            LiveError: the episode is over, the person gave no or a malformed action, or the env
                rejected the action outright (text envs report an invalid one in their info instead).
        """
        with self.lock:
            if self._done:
                raise LiveError(f"the episode is over (return {self._return:g}); press Reset for another")
            if self.policy is not None:
                env_action = self._policy_action()
            elif action is None:
                raise LiveError("no action given: this session has no policy, so type or press an action")
            else:
                env_action = parse_action(self.env.action_space, action)
            try:
                obs, reward, terminated, truncated, info = self.env.step(env_action)
            except (ValueError, TypeError, AssertionError, gym.error.Error) as exc:
                raise LiveError(f"{self.env_id} rejected action {env_action!r}: {_one_line(exc)}") from exc
            self._t += 1
            self._return += float(reward)
            self._done = bool(terminated or truncated)
            self._last = {
                "action": env_action, "reward": float(reward), "terminated": terminated,
                "truncated": truncated, "info": dict(info),
            }  # fmt: skip
            self._observe(obs)
            return self._view()

    def view(self) -> dict[str, Any]:
        """The current step's view (what the last reset or step returned)."""
        with self.lock:
            return self._view()

    def image(self, column: str) -> bytes:
        """The current image ``column`` (``obs/<key>`` or ``frame``) as PNG bytes."""
        with self.lock:
            image = self._frame if column == "frame" else self._obs.get(column.removeprefix("obs/"))
            if image is None or column not in self._image_columns():
                raise NotFoundError(f"live session {self.id} has no image {column!r}")
            return encode_png(np.asarray(image))

    def close(self) -> None:
        """Close the env."""
        self.env.close()

    def _policy_action(self) -> Any:
        batch = {key: _batch(value) for key, value in self._obs.items()}
        try:
            actions = self.policy.predict(batch, deterministic=True)
        except Exception as exc:
            raise LiveError(f"policy {self.policy_name} failed on this step: {_one_line(exc)}") from exc
        action = actions[0] if isinstance(actions, (list, tuple)) else np.asarray(actions)[0]
        if isinstance(action, str) or isinstance(self.env.action_space, spaces.Text):
            return str(action)
        from omnigym.platform.vec_env import to_env_action

        return to_env_action(self.env.action_space, np.asarray(action))

    def _observe(self, obs: Any) -> None:
        self._obs = dict(obs) if isinstance(obs, dict) else {"state": obs}
        has_image = any(not isinstance(v, str) and _is_image(v) for v in self._obs.values())
        self._frame = None if has_image else _render(self.env)
        self._version += 1

    def _image_columns(self) -> list[str]:
        columns = [f"obs/{k}" for k, v in self._obs.items() if not isinstance(v, str) and _is_image(v)]
        return [*columns, "frame"] if self._frame is not None else columns

    def _view(self) -> dict[str, Any]:
        last, info = self._last, self._last.get("info", {})
        images = []
        for column in self._image_columns():
            image = np.asarray(self._frame if column == "frame" else self._obs[column.removeprefix("obs/")])
            url = f"/api/live/{self.id}/image/{column}?v={self._version}"
            images.append({"column": column, "url": url, "width": image.shape[1], "height": image.shape[0]})
        view = step_view(
            t=self._t, length=None, images=images, action=last.get("action"), reward=last.get("reward"),
            observations={k: v for k, v in self._obs.items() if isinstance(v, str) or not _is_image(v)},
            terminated=last.get("terminated"), truncated=last.get("truncated"),
            components=info.get("reward_components") or {},
            infos={k: v for k, v in info.items() if _scalar(v)},
        )  # fmt: skip
        return {
            **view, "id": self.id, "env_id": self.env_id, "policy": self.policy_name, "seed": self.seed,
            "return_so_far": self._return, "done": self._done, "action_space": action_spec(self.env),
            "previous_action": True,
        }  # fmt: skip


class LiveSessions:
    """The server's open live sessions, by id (at most :data:`MAX_SESSIONS`)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, LiveSession] = OrderedDict()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def create(
        self, env_id: str, policy: str | None = None, env_kwargs: dict[str, Any] | None = None, seed: int = 0
    ) -> LiveSession:
        """Make ``env_id`` (``rgb_array`` rendering) and, unless ``policy`` is empty, the policy; reset it.

        Raises:
            LiveError: an unknown env id or keyword, a policy spec that names nothing, or a policy
                that cannot act in the env's spaces.
        """
        from omnigym.platform.cli.errors import USER_ERRORS
        from omnigym.platform.vec_env import EnvArgumentError, make_env

        if not env_id or not isinstance(env_id, str):
            raise LiveError("give an env id, e.g. omnigym/GUI-ClickButton-v0 or CartPole-v1")
        if not isinstance(env_kwargs or {}, dict):
            raise LiveError(f"env kwargs must be a JSON object, got {type(env_kwargs).__name__}")
        try:
            agent = self._policy(policy, env_id, env_kwargs or {}) if policy else None
            kwargs = {**getattr(agent, "env_kwargs", {}), **(env_kwargs or {})}
            env = make_env(env_id, render_mode="rgb_array", **kwargs)
        except EnvArgumentError as exc:
            if policy and exc.kwarg is not None and exc.kwarg not in (env_kwargs or {}):  # the policy's kwarg
                raise LiveError(
                    f"policy {policy} does not fit {env_id}: it makes its env with {exc.kwarg!r}, "
                    f"which {env_id} does not take"
                ) from exc
            raise LiveError(exc.describe(id_flag="env id", kwargs_flag="env kwargs")) from exc
        except (*USER_ERRORS, gym.error.Error) as exc:  # type: ignore[misc]
            raise LiveError(_one_line(exc).replace("--policy ", "policy ").replace("--env ", "env ")) from exc
        session_id = f"s{next(self._ids)}"
        session = LiveSession(session_id, env_id, env, agent, policy or "", int(seed))
        try:
            session.reset(seed)
        except Exception:
            session.close()
            raise
        with self._lock:
            self._sessions[session_id] = session
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)[1].close()
        return session

    def get(self, session_id: str) -> LiveSession:
        """The session ``session_id``; :class:`NotFoundError` when it was never opened or is closed."""
        with self._lock:
            if session_id not in self._sessions:
                raise NotFoundError(f"no live session {session_id!r} (closed, or the server restarted)")
            self._sessions.move_to_end(session_id)
            return self._sessions[session_id]

    def close(self, session_id: str) -> None:
        """Close and forget one session."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            raise NotFoundError(f"no live session {session_id!r}")
        session.close()

    def close_all(self) -> None:
        """Close every session (the server is stopping)."""
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        for session in sessions:
            session.close()

    @staticmethod
    def _policy(spec: str, env_id: str, env_kwargs: dict[str, Any]) -> Any:
        from omnigym.platform.cli.policy_spec import resolve_policy

        return resolve_policy(spec, env_id, env_kwargs)


def parse_action(space: spaces.Space, raw: Any) -> Any:
    """A person's action from the page (text, a number, a list or JSON text) as ``space`` takes it.

    Raises:
        LiveError: the action does not fit ``space``; the message says what would.
    """
    import json

    if isinstance(space, spaces.Text):
        if not isinstance(raw, str):
            raise LiveError(f"this env takes text actions, got {type(raw).__name__} {raw!r}")
        return raw  # the env itself reports a malformed reply (info action_valid / action_error)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise LiveError(f"{raw!r} is not a number or JSON list; {_expected(space)}") from None
    try:
        value = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise LiveError(f"{raw!r} is not numeric; {_expected(space)}") from None
    if not np.all(np.isfinite(value)):
        raise LiveError(f"action {raw!r} is not finite; {_expected(space)}")
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        if not np.all(value == np.round(value)):
            raise LiveError(f"action {raw!r} is not a whole number; {_expected(space)}")
        action: Any = value.astype(np.int64) if value.ndim else np.int64(value)
    else:
        action = value.astype(space.dtype) if space.dtype is not None else value
    if isinstance(space, spaces.Box) and action.shape != space.shape:
        raise LiveError(f"action has shape {list(action.shape)}; {_expected(space)}")
    if not space.contains(action):
        raise LiveError(f"action {raw!r} is outside the action space; {_expected(space)}")
    return action


def action_spec(env: gym.Env) -> dict[str, Any]:
    """How the page asks a person for an action: the space's kind and bounds, Discrete action names."""
    space = env.action_space
    if isinstance(space, spaces.Text):
        return {"kind": "text", "max_length": space.max_length}
    if isinstance(space, spaces.Discrete):
        meanings = getattr(env.unwrapped, "get_action_meanings", None)
        names = [str(m) for m in meanings()] if callable(meanings) else []
        return {"kind": "discrete", "n": int(space.n), "start": int(space.start), "names": names}
    if isinstance(space, spaces.Box):
        return {
            "kind": "box", "shape": list(space.shape),
            "low": [_bound(v) for v in space.low.ravel().tolist()],
            "high": [_bound(v) for v in space.high.ravel().tolist()],
        }  # fmt: skip
    return {"kind": "json", "space": str(space)}


def _expected(space: spaces.Space) -> str:
    if isinstance(space, spaces.Discrete):
        return f"Discrete({space.n}) takes a whole number {space.start}..{space.start + space.n - 1}"
    if isinstance(space, spaces.Box):
        low, high = space.low.min(), space.high.max()
        shape = list(space.shape)
        return f"Box takes a JSON list of shape {shape} within [{low:g}, {high:g}], e.g. {_example(space)}"
    return f"the env takes {space}"


def _example(space: spaces.Box) -> str:
    centre = np.clip(np.zeros(space.shape), space.low, space.high)
    return str(np.round(centre, 3).tolist())


def _bound(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _batch(value: Any) -> np.ndarray:
    """One observation value as a batch of one (text as an object array, as evaluation stacks it)."""
    if isinstance(value, str):
        array = np.empty(1, dtype=object)
        array[0] = value
        return array
    return np.asarray(value)[None]


def _is_image(value: Any) -> bool:
    try:
        return value_kind(value) == KIND_IMAGE
    except ValueError:
        return False


def _scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str, np.bool_, np.integer, np.floating)) or (
        isinstance(value, np.ndarray) and value.ndim == 0
    )


def _render(env: gym.Env) -> np.ndarray | None:
    try:
        frame = env.render()
    except Exception:  # an env that cannot render is still playable, just without a picture
        return None
    return np.asarray(frame) if frame is not None and _is_image(np.asarray(frame)) else None


def _one_line(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(text.split()) or type(exc).__name__
