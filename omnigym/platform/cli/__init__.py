"""The ``omnigym`` command: one module per command group, each with its parsers beside its handlers.

``main`` turns every error a user can cause into one line, ``omnigym <command>: error: ...``, and
exit status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from omnigym.platform.cli import agents, catalog, deploy, evaluate, learn, train, view, world_model
from omnigym.platform.cli.catalog import BENCH_DIR, list_benchmarks
from omnigym.platform.cli.errors import UsageError, report_error
from omnigym.platform.cli.policy_spec import resolve_policy
from omnigym.platform.interrupts import INTERRUPT_EXIT_CODE, TrainingInterrupted
from omnigym.platform.runtime import THREADS_ENV_VAR, apply_thread_policy

__all__ = ["BENCH_DIR", "build_parser", "list_benchmarks", "main", "resolve_policy"]

DESCRIPTION = """\
omnigym: train, evaluate and compare RL agents on Gymnasium envs.

Run 'omnigym COMMAND --help' for a command's options; docs/cli.md describes them all.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every command."""
    parser = argparse.ArgumentParser(
        prog="omnigym", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--debug", dest="global_debug", action="store_true",
        help="show the full traceback of an error instead of one line",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train.add_parsers(sub)
    evaluate.add_parsers(sub)
    agents.add_parsers(sub)
    learn.add_parsers(sub)
    world_model.add_parsers(sub)
    catalog.add_parsers(sub)
    view.add_parsers(sub)
    deploy.add_parsers(sub)
    for name, command in sub.choices.items():
        if name != "bench":  # a benchmark's options are its script's (it records its own threads)
            _add_common_options(command)
    return parser


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--threads`` and ``--debug`` on a command, or on each command of a group."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if groups:
        for command in groups[0].choices.values():
            _add_common_options(command)
        return
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help=f"torch CPU threads for this command (default ${THREADS_ENV_VAR}, else 1; "
        "train uses runtime.torch_threads)",
    )  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="show an error's traceback instead of one line")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``omnigym`` command."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    args.debug = args.global_debug or getattr(args, "debug", False)
    # Overrides may also follow options (`train exp --seeds 1,2 key=value`): argparse leaves them over.
    if (
        extra
        and hasattr(args, "overrides")
        and all(("=" in e or e.startswith("~")) and not e.startswith("-") for e in extra)
    ):
        args.overrides = [*args.overrides, *extra]
    elif extra and args.command == "bench":  # the benchmark's own options (`--task driving`)
        args.bench_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    command = _command_name(args)
    try:
        if args.command != "bench":
            apply_thread_policy(getattr(args, "threads", None))
        return int(args.func(args) or 0)
    except TrainingInterrupted as exc:  # checkpointed: the message says how to resume
        print(f"omnigym {command}: {exc}", file=sys.stderr)
        return INTERRUPT_EXIT_CODE
    except KeyboardInterrupt:
        print(f"omnigym {command}: interrupted", file=sys.stderr)
        return INTERRUPT_EXIT_CODE
    except SystemExit as exc:
        if isinstance(exc.code, str) and not args.debug:
            return report_error(command, UsageError(exc.code))
        raise
    except Exception as exc:
        if args.debug:
            raise
        return report_error(command, exc)


def _command_name(args: argparse.Namespace) -> str:
    """``train``, or ``world-model fit`` for a command of a group."""
    group_commands = ("world_model_command", "vlm_command", "datasets_command")
    return " ".join([args.command, *(getattr(args, k) for k in group_commands if getattr(args, k, None))])
