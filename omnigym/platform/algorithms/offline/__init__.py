"""Offline RL: algorithms that learn from a fixed dataset of transitions (and keep learning online)."""
