"""Peer env suites under omnigym's conventions: ManiSkill3, BrowserGym's MiniWoB, LeRobot's gym-aloha.

One adapter module per peer. Which ids exist, and when, is decided in :mod:`omnigym.envs.ext_ids`,
which imports none of these modules (docs/envs/peer-adapters.md).
"""
