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
