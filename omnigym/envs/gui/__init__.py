"""Synthetic GUI tasks: a widget-tree simulator, MiniWoB-style task families and their oracle.

The action grammar (``actions.py``) and the observation layout (``image`` screenshot, ``text``
instruction plus accessibility tree) are shared with the real-browser adapter, so one VLM
policy acts in both. ``docs/envs/gui.md`` describes the widgets, families and grammar.
"""
