"""MuJoCo manipulation: own tasks, scripted experts, and adapters for other simulators."""
