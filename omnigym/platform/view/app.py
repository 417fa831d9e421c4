"""The viewer's web app: a JSON API over recordings, runs and live sessions, and the static page.

Every error comes back as JSON ``{"error": "<one line>"}`` with a 4xx status (404 for something
that does not exist, 400 for a request that cannot be done, 403 for live sessions when the
server was started without ``--live``), never as an HTML traceback, so the page can show it as
one line. ``docs/view.md`` lists the endpoints.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import gymnasium as gym
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from omnigym.platform.cli.errors import UsageError
from omnigym.platform.view import STATIC_DIR
from omnigym.platform.view.curves import Run, curves, run_summary
from omnigym.platform.view.live import LiveSessions
from omnigym.platform.view.replay import NotFoundError, Replay, pairs_by_seed

LOG = logging.getLogger("omnigym.view")
LIVE_OFF = "live sessions are off: start the viewer with `omnigym view --live` to run or play envs"


class LiveCreate(BaseModel):
    """``POST /api/live``: what to make. No ``policy``: a person plays."""

    env_id: str
    policy: str | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0


class LiveStep(BaseModel):
    """``POST /api/live/{id}/step``: a person's action (text, number, list or JSON); a policy needs none."""

    action: Any = None


class LiveReset(BaseModel):
    """``POST /api/live/{id}/reset``: the seed of the new episode (default: the next one)."""

    seed: int | None = None


def create_app(
    recordings: Sequence[Replay], runs: Sequence[Run] = (), *, live: bool = False, title: str = "omnigym view"
) -> FastAPI:
    """The viewer app over opened recordings and runs.

    Args:
        recordings: the recordings to replay (:func:`~omnigym.platform.view.replay.open_recordings`),
            addressed by their position in the API.
        runs: the runs whose ``metrics.jsonl`` the curves page plots
            (:func:`~omnigym.platform.view.curves.open_runs`).
        live: allow live sessions, which make envs and run policies in this server process.
        title: the page's title.

    Returns:
        The FastAPI app; serve it with uvicorn. Live sessions are closed when it shuts down.
    """
    sessions = LiveSessions()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        sessions.close_all()

    app = FastAPI(title=title, lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.sessions = sessions
    _add_error_handlers(app)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    def replay(index: int) -> Replay:
        if not 0 <= index < len(recordings):
            raise NotFoundError(f"no recording {index}; the viewer has recordings 0..{len(recordings) - 1}")
        return recordings[index]

    def live_sessions() -> LiveSessions:
        if not live:
            raise HTTPException(403, LIVE_OFF)
        return sessions

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        """What the viewer holds: recordings (with their episodes tables), run names, whether live is on."""
        return {
            "title": title, "live": live, "runs": [run.name for run in runs],
            "recordings": [{"id": i, **r.summary()} for i, r in enumerate(recordings)],
        }  # fmt: skip

    @app.get("/api/recordings/{rec}")
    def recording(rec: int) -> dict[str, Any]:
        """One recording's header and episodes table."""
        return {"id": rec, **replay(rec).summary()}

    @app.get("/api/recordings/{rec}/episodes/{ep}")
    def episode(rec: int, ep: int) -> dict[str, Any]:
        """One episode's summary, per-step rewards and image columns."""
        return replay(rec).episode(ep)

    @app.get("/api/recordings/{rec}/episodes/{ep}/steps/{t}")
    def step(rec: int, ep: int, t: int) -> dict[str, Any]:
        """Step ``t`` of an episode: images (URLs), text, arrays, action, reward, components, infos."""
        view = replay(rec).step(ep, t)
        for image in view["images"]:
            image["url"] = f"/api/recordings/{rec}/episodes/{ep}/steps/{t}/image/{image['column']}"
        return view

    @app.get("/api/recordings/{rec}/episodes/{ep}/steps/{t}/image/{column:path}")
    def step_image(rec: int, ep: int, t: int, column: str) -> Response:
        """An image column (``obs/<key>`` or ``frame``) of step ``t``, as the PNG the recording holds."""
        data = replay(rec).image(ep, t, column)
        return Response(data, media_type="image/png", headers={"Cache-Control": "max-age=3600"})

    @app.get("/api/pairs")
    def pairs(a: int, b: int) -> dict[str, Any]:
        """Episodes of recordings ``a`` and ``b`` with the same seed, for side-by-side replay."""
        return pairs_by_seed(replay(a), replay(b))

    @app.get("/api/runs")
    def run_list() -> list[dict[str, Any]]:
        """Each run's name, path, logged metrics and last step."""
        return [run_summary(run) for run in runs]

    @app.get("/api/curves")
    def curve_data(metric: list[str] = Query(default_factory=list)) -> dict[str, Any]:  # noqa: B008
        """The asked metrics of every run as ``[step, value]`` points."""
        if not metric:
            raise ValueError("name at least one metric, e.g. /api/curves?metric=train/loss&metric=train/sps")
        return {"metrics": metric, "runs": curves(runs, metric)}

    @app.post("/api/live")
    def live_create(request: LiveCreate) -> dict[str, Any]:
        """Make an env (and a policy, unless none is named) and return the first step's view."""
        session = live_sessions().create(request.env_id, request.policy, request.env_kwargs, request.seed)
        return session.view()

    @app.get("/api/live/{sid}")
    def live_view(sid: str) -> dict[str, Any]:
        """The session's current step."""
        return live_sessions().get(sid).view()

    @app.post("/api/live/{sid}/step")
    def live_step(sid: str, request: LiveStep) -> dict[str, Any]:
        """Step the env: the policy acts, or the person's ``action`` is parsed for the env's space."""
        return live_sessions().get(sid).step(request.action)

    @app.post("/api/live/{sid}/reset")
    def live_reset(sid: str, request: LiveReset) -> dict[str, Any]:
        """Start a new episode."""
        return live_sessions().get(sid).reset(request.seed)

    @app.delete("/api/live/{sid}")
    def live_close(sid: str) -> dict[str, Any]:
        """Close the session and its env."""
        live_sessions().close(sid)
        return {"closed": sid}

    @app.get("/api/live/{sid}/image/{column:path}")
    def live_image(sid: str, column: str) -> Response:
        """The session's current image column as PNG."""
        data = live_sessions().get(sid).image(column)
        return Response(data, media_type="image/png", headers={"Cache-Control": "no-store"})

    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Turn every error into ``{"error": "<one line>"}``: 404, 400, 403, 422 for the user's, 500 for bugs."""

    def reply(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
        async def handler(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse({"error": one_line(exc)}, status_code=status)

        return handler

    app.add_exception_handler(NotFoundError, reply(404))
    for user_error in (ValueError, UsageError, FileNotFoundError, KeyError, gym.error.Error):
        app.add_exception_handler(user_error, reply(400))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no page or endpoint {request.url.path} (docs/view.md lists the endpoints)"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        return JSONResponse({"error": message}, status_code=exc.status_code)

    async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = [
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'request'}: {e.get('msg', '')}"
            for e in exc.errors()
        ]  # fmt: skip
        return JSONResponse({"error": "; ".join(problems)}, status_code=422)

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)

    @app.middleware("http")
    async def internal_errors(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        try:
            return await call_next(request)
        except Exception as exc:  # a bug: still one JSON line for the page, the traceback in the server log
            LOG.exception("omnigym view: %s %s failed", request.method, request.url.path)
            message = f"internal error: {type(exc).__name__}: {one_line(exc)}"
            return JSONResponse({"error": message}, status_code=500)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (a ``KeyError``'s without its quotes)."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(text.split()) or type(exc).__name__
