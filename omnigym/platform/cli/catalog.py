"""``omnigym list`` and ``omnigym bench``."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

from omnigym.platform.cli.errors import UsageError
from omnigym.platform.experiment import REPO_ROOT

BENCH_DIR = REPO_ROOT / "bench"
"""The benchmark scripts: repository-only tools, present in a source checkout, not in a wheel."""
NOT_INSTALLED = (
    "benchmarks are repository scripts (bench/ in a source checkout of omnigym); "
    "they are not installed with the package"
)
ONLY_IN_CHECKOUT = "(benchmarks: only in a source checkout)"
"""What ``omnigym list`` and ``omnigym bench --list`` print where there is no ``bench/``."""
NOT_RECORDED = "not recorded"
"""A run time no measured run has recorded (the script has no ``DURATIONS``, or not that key)."""


def _cmd_list(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import omnigym  # noqa: F401  (registers the omnigym envs)
    from omnigym.core.registry import ALGORITHMS, POLICIES, WORLD_MODELS
    from omnigym.envs import omnigym_env_ids
    from omnigym.platform.experiment import list_experiments

    env_ids = sorted(gym.registry) if args.all_envs else omnigym_env_ids()
    sections = {
        "envs"
        if args.all_envs
        else "envs (omnigym; any Gymnasium id also works, --all-envs lists them)": env_ids,
        "policies": POLICIES.names(),
        "algorithms": ALGORITHMS.names(),
        "world models": WORLD_MODELS.names(),
        "experiments": list_experiments(),
        "benchmarks": list_benchmarks(),
    }
    for title, names in sections.items():
        print(f"{title}:")
        if title == "benchmarks" and not BENCH_DIR.is_dir():
            print(f"  {ONLY_IN_CHECKOUT}")
        else:
            print("\n".join(f"  {n}" for n in names) if names else "  (none yet)")
    return 0


def list_benchmarks() -> list[str]:
    """Benchmark names: the scripts in ``bench/`` (none outside a source checkout)."""
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if not p.stem.startswith("_"))


def bench_durations(script: Path) -> dict[str, str]:
    """The run times a bench script records in its module-level ``DURATIONS`` dict literal.

    The file is parsed with ``ast``, never imported: the scripts import torch, Ray, MuJoCo and
    peer libraries at the top, which would make ``--list`` slow and fail without the extras.
    A script without the constant, or whose ``DURATIONS`` is not a literal dict, gives ``{}``
    (listed as "not recorded") rather than an error: one broken script must not hide the others.
    """
    try:
        tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return {}
    values = [value for node in tree.body if (value := _assigned_value(node, "DURATIONS")) is not None]
    return _literal_durations(values[-1]) if values else {}  # the last assignment wins, as on import


def _literal_durations(value: ast.expr) -> dict[str, str]:
    """``value`` evaluated as a literal dict of non-empty strings (other entries dropped), else ``{}``."""
    try:
        durations = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return {}
    if not isinstance(durations, dict):
        return {}
    entries = {k: v.strip() for k, v in durations.items() if isinstance(k, str) and isinstance(v, str)}
    return {k: v for k, v in entries.items() if v}


def _assigned_value(node: ast.stmt, name: str) -> ast.expr | None:
    """The value of ``name = ...`` or ``name: T = ...`` at module level, else None."""
    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
        return node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
        return node.value
    return None


def benchmark_table() -> list[str]:
    """``bench --list``'s lines: a header, then each benchmark's quick and full run times, aligned."""
    rows = [("benchmark", "quick", "full")]
    for name in list_benchmarks():
        durations = bench_durations(BENCH_DIR / f"{name}.py")
        rows.append((name, durations.get("quick", NOT_RECORDED), durations.get("full", NOT_RECORDED)))
    name_width, quick_width = (max(len(row[i]) for row in rows) for i in (0, 1))
    return [f"{name:<{name_width}}  {quick:<{quick_width}}  {full}" for name, quick, full in rows]


def _cmd_bench(args: argparse.Namespace) -> int:
    """``bench NAME``: run the script in a fresh interpreter and return its exit status."""
    if args.list:
        return _list_bench(args)
    if not BENCH_DIR.is_dir():
        raise UsageError(NOT_INSTALLED)
    if args.name is None:
        raise UsageError("bench: name a benchmark, or pass --list to see them with their run times")
    script = BENCH_DIR / f"{args.name}.py"
    if not script.is_file():
        raise SystemExit(f"unknown benchmark {args.name!r}; known: {', '.join(list_benchmarks())}")
    command = [sys.executable, str(script), *(["--quick"] if args.quick else []), *args.bench_args]
    return subprocess.call(command)


def _list_bench(args: argparse.Namespace) -> int:
    """``bench --list``: print the table; it runs nothing, so a name or script options are a mistake."""
    extra = [*([args.name] if args.name else []), *(["--quick"] if args.quick else []), *args.bench_args]
    if extra:
        raise UsageError(f"--list takes no benchmark or options to run one (got {' '.join(extra)})")
    if not BENCH_DIR.is_dir():
        print(ONLY_IN_CHECKOUT)
        return 0
    print("\n".join(benchmark_table()))
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``list`` and ``bench`` commands."""
    listing = sub.add_parser(
        "list", help="list envs, policies, algorithms, world models, experiments, benchmarks"
    )
    listing.add_argument("--all-envs", action="store_true", help="list every Gymnasium env id")
    listing.set_defaults(func=_cmd_list)

    bench = sub.add_parser(
        "bench",
        help="run bench/<name>.py (further options go to the script); its last line is one JSON object",
    )
    bench.add_argument("name", nargs="?", help="benchmark name (see `omnigym bench --list`)")
    bench.add_argument(
        "--quick", action="store_true",
        help="the same measurement at a smaller budget (see --list for the times)",
    )  # fmt: skip
    bench.add_argument(
        "--list", action="store_true",
        help="list every benchmark with its quick and full run times as recorded on a 2-core CPU, and exit",
    )  # fmt: skip
    bench.set_defaults(func=_cmd_bench, bench_args=[])
