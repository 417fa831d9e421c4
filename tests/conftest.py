"""Settings for the whole test suite, applied before any test module imports a library."""

import os

# Tests build their models locally (tiny VLMs) and must never wait on the Hugging Face hub:
# huggingface_hub reads this once, at import, so it is set here rather than per test.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The default run spreads tests over two pytest-xdist workers on the two cores (scripts/test.sh);
# each worker then computes on one thread, so the two do not fight over the cores. torch, OpenMP
# and numba read these once, at import.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

HEAVY_FIRST = (
    "test_learning.py", "test_ray_runtime.py", "test_isaaclab.py", "test_offline.py", "test_rssm.py",
    "test_sft.py", "test_group_learning.py", "test_noise_steering.py", "test_diffusion.py",
    "test_flow_grpo.py", "test_planner.py", "test_step_checks.py",
)  # fmt: skip
"""Test files holding the long learning checks (10-45 s each)."""


def pytest_collection_modifyitems(items: list) -> None:
    """Run the files of long learning checks first (each file's tests stay together, in order).

    xdist hands each worker a share of the collected order and lets idle workers take from the
    end of the others' shares: with the long tests up front, the run does not end with one worker
    busy on a 40-second test while the other waits.
    """
    items.sort(key=lambda item: item.path.name not in HEAVY_FIRST)
