"""``omnigym view``: serve the local web viewer of recordings, live envs and learning curves.

Recordings are the directories ``omnigym eval --record`` writes (or a Minari dataset, converted
into a temporary directory that is removed on exit); runs are training run directories whose
``metrics.jsonl`` the curves page plots. The server listens on ``127.0.0.1`` by default, so only
this machine can see it; ``--live`` lets the page make envs and run policies in this process.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

from omnigym.platform.cli.errors import UsageError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def _cmd_view(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise UsageError(
            f"omnigym view needs fastapi and uvicorn ({exc}); pip install 'omnigym[view]'"
        ) from None
    from omnigym.platform.view.app import create_app
    from omnigym.platform.view.curves import open_runs
    from omnigym.platform.view.replay import open_recordings

    if not (args.recordings or args.minari or args.run or args.live):
        raise UsageError(
            "give a recording DIR, --minari ID, --run RUN_DIR or --live (see omnigym view --help)"
        )
    for path in map(Path, args.recordings):
        if (path / "metrics.jsonl").is_file() and not (path / "recording.json").is_file():
            raise UsageError(f"{path} is a training run, not an episode recording; plot it with --run {path}")
    with contextlib.ExitStack() as stack:
        directories = [*args.recordings, *(_from_minari(stack, dataset_id) for dataset_id in args.minari)]
        names = [None] * len(args.recordings) + [f"minari:{dataset_id}" for dataset_id in args.minari]
        app = create_app(open_recordings(directories, names), open_runs(args.run), live=args.live)
        _check_port(args.host, args.port)
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"omnigym view: serving on http://{host}:{args.port}/ (Ctrl-C stops it)", flush=True)
        try:
            server.run()  # handles Ctrl-C itself: finishes open requests, closes live sessions, returns
        except SystemExit:  # uvicorn exits when it cannot start (the port was taken since the check)
            raise UsageError(f"cannot listen on {args.host}:{args.port}; pick another with --port") from None
    print("omnigym view: stopped")
    return 0


def _check_port(host: str, port: int) -> None:
    """Fail in one line, before anything is served, when ``host:port`` cannot be listened on."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: not an address this machine has ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {host}:{port} ({exc.strerror}); pick another with --port"
            ) from None


def _from_minari(stack: contextlib.ExitStack, dataset_id: str) -> str:
    """Convert Minari dataset ``dataset_id`` into a temporary recording removed when ``stack`` closes."""
    from omnigym.platform.episodes.minari_convert import minari_to_recording

    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="omnigym-view-")))
    print(f"omnigym view: converting Minari dataset {dataset_id} …", flush=True)
    return str(minari_to_recording(dataset_id, root / dataset_id.replace("/", "_")))


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``view`` command."""
    view = sub.add_parser(
        "view", help="web viewer: replay recorded episodes, run or play envs live, plot learning curves",
        description="Serve a local web page to replay episode recordings step by step (side by side by "
        "seed), run a policy or play an env live (--live), and plot runs' metrics.jsonl (--run). "
        "docs/view.md describes it.",
    )  # fmt: skip
    view.add_argument("recordings", nargs="*", metavar="DIR", help="episode recording directories to replay")
    view.add_argument(
        "--minari", action="append", default=[], metavar="ID",
        help="a Minari dataset id to replay (converted on the fly; repeatable)",
    )  # fmt: skip
    view.add_argument(
        "--run", action="append", default=[], metavar="RUN_DIR",
        help="a training run directory whose metrics.jsonl the curves page plots (repeat to overlay runs)",
    )  # fmt: skip
    view.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    view.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    view.add_argument(
        "--live", action="store_true",
        help="allow live sessions: the page makes envs and runs policies (or you act) in this process",
    )  # fmt: skip
    view.set_defaults(func=_cmd_view)
