"""``omnigym list`` and ``omnigym bench``."""

from __future__ import annotations

import argparse
import subprocess
import sys

from omnigym.platform.cli.errors import UsageError
from omnigym.platform.experiment import REPO_ROOT

BENCH_DIR = REPO_ROOT / "bench"
"""The benchmark scripts: repository-only tools, present in a source checkout, not in a wheel."""
NOT_INSTALLED = (
    "benchmarks are repository scripts (bench/ in a source checkout of omnigym); "
    "they are not installed with the package"
)


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
            print("  (benchmarks: only in a source checkout)")
        else:
            print("\n".join(f"  {n}" for n in names) if names else "  (none yet)")
    return 0


def list_benchmarks() -> list[str]:
    """Benchmark names: the scripts in ``bench/`` (none outside a source checkout)."""
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if not p.stem.startswith("_"))


def _cmd_bench(args: argparse.Namespace) -> int:
    if not BENCH_DIR.is_dir():
        raise UsageError(NOT_INSTALLED)
    script = BENCH_DIR / f"{args.name}.py"
    if not script.is_file():
        raise SystemExit(f"unknown benchmark {args.name!r}; known: {', '.join(list_benchmarks())}")
    command = [sys.executable, str(script), *(["--quick"] if args.quick else []), *args.bench_args]
    return subprocess.call(command)


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
    bench.add_argument("name", help="benchmark name (see `omnigym list`)")
    bench.add_argument("--quick", action="store_true", help="the same measurement, smaller, under a minute")
    bench.set_defaults(func=_cmd_bench, bench_args=[])
