"""The CLI's one-thread default vs torch's default threads, on a small machine that is busy.

Every command but ``bench`` now runs torch on one thread (``--threads N`` or ``$OMNIGYM_THREADS``
say otherwise); before, torch took one thread per core. On a 2-core machine shared with another
process, a command with a thread per core has its threads wait for each other at every parallel
region while the other process holds a core, so it runs slower than it would on one thread.

Measured, each as a fresh ``python -m omnigym`` subprocess (start-up included, as a user sees it):

* ``bc``: ``omnigym bc`` of a ``diffusion`` policy on ``pusht_expert`` demonstrations (10
  episodes), collected first with ``omnigym collect`` into a temporary ``$MINARI_DATASETS_PATH``
  (not timed): 40 steps of 64 windows with the config's U-Net (6.3 M parameters, 10 DDIM steps);
* ``eval``: ``omnigym eval`` of that policy on ``omnigym/PushT-v0``, one 300-step episode.

``--quick`` (one repeat, about 90 s) trains 4 steps of 16 windows of ``pusht_bc``'s CPU U-Net
(1.6 M parameters) with 2 DDIM steps on 2 demonstrations: the commands' start-up then weighs more
than their compute. With a still smaller U-Net the two settings tie: torch runs ops that small on
one thread whatever its thread count.

Three settings: ``quiet`` (new default, idle machine), ``loaded`` (new default while a busy process
spins torch matmuls on as many threads as there are cores) and ``loaded_old`` (``--threads`` = the
core count, the old behaviour, under the same load). Each figure is the median of the repeats; the
settings take turns within each repeat, so a drift in the machine's load weighs on all alike.

Reported: ``ratio`` = loaded_old / loaded wall time of both commands together (> 1: the new
default is faster under load), ``loaded_over_quiet`` = loaded / quiet for the new default (target
<= 1.5), the per-command figures, the thread counts and the core count.

Usage: ``omnigym bench cli_overhead [--quick]`` (full: 3 repeats, about 16 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

DURATIONS = {"quick": "about 90 s", "full": "about 16 min"}
"""On a 2-core CPU shared with other work: the usage line above and README.md (one torch thread)."""

ENV_ID = "omnigym/PushT-v0"
DATASET_ID = "omnigym/pusht-cli-overhead-v0"
LOAD_SIZE = 384
"""Side of the busy process's square matrices (a few ms per product: it never lets go)."""
LOAD_SCRIPT = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))
a = torch.randn({size}, {size})
print("busy", flush=True)
while True:
    a = torch.tanh(a @ a)
"""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def omnigym(args: list[str], env: dict[str, str], threads: int | None = None) -> float:
    """Run ``python -m omnigym ARGS`` (``--threads`` appended when given); its wall time in seconds.

    Raises:
        RuntimeError: the command failed (its stderr's tail is in the message).
    """
    argv = [sys.executable, "-m", "omnigym", *args, *(["--threads", str(threads)] if threads else [])]
    tic = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - tic
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


class BusyProcess:
    """A separate process spinning torch matmuls on ``threads`` threads, for a ``with`` block."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> BusyProcess:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", LOAD_SCRIPT.format(size=LOAD_SIZE), str(self.threads)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        self._proc.stdout.readline()  # "busy": torch is imported and the loop starts
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=30)
            self._proc = None


def main() -> None:
    """Collect, then time ``bc`` and ``eval`` in the three settings; the last line is JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one repeat, short commands (about 90 s)")
    args = parser.parse_args()
    n_cores = cores()
    if args.quick:  # a small U-Net and few steps: the commands' work is then about their start-up's
        repeats, demo_episodes, bc_steps, batch_size, eval_episodes = 1, 2, 4, 16, 1
        net = ["down_dims=[32,64,128]", "state_hidden_sizes=[128,128]", "num_inference_steps=2"]
    else:
        repeats, demo_episodes, bc_steps, batch_size, eval_episodes = 3, 10, 40, 64, 1
        net = []  # the config's U-Net, 10 DDIM steps
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "OMNIGYM_THREADS"}
        env["MINARI_DATASETS_PATH"] = str(Path(tmp) / "datasets")
        policy_dir = str(Path(tmp) / "policy")
        collect = ["collect", "--policy", "pusht_expert", "--env", ENV_ID, "--dataset-id", DATASET_ID]
        collect_s = omnigym([*collect, "--episodes", str(demo_episodes)], env)
        print(f"collected {demo_episodes} pusht_expert episodes ({collect_s:.0f} s)", flush=True)
        bc = ["bc", "--dataset", DATASET_ID, "--policy", "diffusion", "--out", policy_dir,
              "--steps", str(bc_steps), "--batch-size", str(batch_size), "--log-every", "0",
              *net]  # fmt: skip
        evaluate = ["eval", "--policy", policy_dir, "--env", ENV_ID, "--episodes", str(eval_episodes)]
        settings: dict[str, tuple[bool, int | None]] = {
            "quiet": (False, None), "loaded": (True, None), "loaded_old": (True, n_cores),
        }  # fmt: skip
        times: dict[str, dict[str, list[float]]] = {s: {"bc": [], "eval": []} for s in settings}
        for repeat in range(repeats):
            for setting, (loaded, threads) in settings.items():
                with BusyProcess(n_cores) if loaded else contextlib.nullcontext():
                    for command, argv in (("bc", bc), ("eval", evaluate)):
                        times[setting][command].append(omnigym(argv, env, threads))
                row = ", ".join(f"{c} {v[-1]:.1f} s" for c, v in times[setting].items())
                print(f"repeat {repeat + 1}/{repeats} {setting}: {row}", flush=True)
    median = {s: {c: statistics.median(v) for c, v in by.items()} for s, by in times.items()}
    total = {s: sum(by.values()) for s, by in median.items()}
    ratio = total["loaded_old"] / total["loaded"]
    loaded_over_quiet = total["loaded"] / total["quiet"]
    print(
        f"under load, the one-thread default takes {total['loaded']:.1f} s, {n_cores} threads "
        f"{total['loaded_old']:.1f} s ({ratio:.2f}x); the default loaded vs quiet: "
        f"{loaded_over_quiet:.2f}x (target <= 1.5)"
    )
    print(json.dumps({
        "bench": "cli_overhead",
        "ratio": round(ratio, 3),
        "loaded_over_quiet": round(loaded_over_quiet, 3),
        "bc_ratio": round(median["loaded_old"]["bc"] / median["loaded"]["bc"], 3),
        "eval_ratio": round(median["loaded_old"]["eval"] / median["loaded"]["eval"], 3),
        "seconds_median": {s: {c: round(v, 2) for c, v in by.items()} for s, by in median.items()},
        "seconds_all": {s: {c: [round(x, 2) for x in v] for c, v in by.items()} for s, by in times.items()},
        "threads_default": 1, "threads_old": n_cores, "load_threads": n_cores, "cores": n_cores,
        "torch_threads": 1,  # the commands timed with the new default policy
        "bench_torch_threads": torch.get_num_threads(),
        "repeats": repeats, "demo_episodes": demo_episodes, "bc_steps": bc_steps, "batch_size": batch_size,
        "eval_episodes": eval_episodes, "policy_overrides": net, "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
