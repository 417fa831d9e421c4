"""Learned simulators that stand in for real environments."""
