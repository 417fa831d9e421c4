"""Settings for the whole test suite, applied before any test module imports a library."""

import os

# Tests build their models locally (tiny VLMs) and must never wait on the Hugging Face hub:
# huggingface_hub reads this once, at import, so it is set here rather than per test.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
