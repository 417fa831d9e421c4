"""omnigym: multimodal and embodied reinforcement learning on Gymnasium.

``import omnigym`` stays light: it registers the omnigym envs with Gymnasium (string entry
points, nothing heavy imported) and exposes the registries.
"""

from omnigym.core.registry import ALGORITHMS, POLICIES, WORLD_MODELS
from omnigym.envs import register_envs

__version__ = "0.1.0"
__all__ = ["ALGORITHMS", "POLICIES", "WORLD_MODELS", "__version__"]

register_envs()
