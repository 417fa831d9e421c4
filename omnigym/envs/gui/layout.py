"""Where widgets go: sizes from the theme's text metrics and seeded random placements.

Families place widgets with these helpers, so every size scales with the screen and random
layouts never overlap or leave the task area.
"""

from __future__ import annotations

import numpy as np

from omnigym.envs.gui.render import Theme
from omnigym.envs.gui.widgets import Rect


def instruction_rect(theme: Theme, width: int) -> Rect:
    """The instruction bar across the top of the screen."""
    return Rect(0, 0, width, theme.instruction_height)


def task_area(theme: Theme, width: int, height: int) -> Rect:
    """The screen below the instruction bar, inside a margin."""
    top = theme.instruction_height + theme.pad
    return Rect(theme.pad, top, width - 2 * theme.pad, height - top - theme.pad)


def button_size(theme: Theme, label: str) -> tuple[int, int]:
    """``(w, h)`` of a button that fits ``label`` with padding."""
    return theme.text_width(label) + 4 * theme.pad, theme.line_height + 2 * theme.pad


def row_height(theme: Theme) -> int:
    """Height of a text field row."""
    return theme.line_height + 2 * theme.pad


def list_row_height(theme: Theme) -> int:
    """Height of one row of a list of checkboxes or radio buttons (tighter than a field)."""
    return theme.line_height + theme.pad


def slider_height(theme: Theme) -> int:
    """Height of a slider: the thumb (one line) above a line for the value."""
    return 2 * theme.line_height


def scatter(rng: np.random.Generator, area: Rect, sizes: list[tuple[int, int]]) -> list[Rect]:
    """Non-overlapping rectangles of ``sizes`` at random places in ``area``.

    The area is cut into a grid of cells each large enough for the largest size; every
    rectangle takes its own random cell and a random offset inside it.

    Raises:
        ValueError: when the area has fewer cells than rectangles.
    """
    cell_w = max(w for w, _ in sizes)
    cell_h = max(h for _, h in sizes)
    cols, rows = max(1, area.w // cell_w), max(1, area.h // cell_h)
    if cols * rows < len(sizes) or cell_w > area.w or cell_h > area.h:
        raise ValueError(f"{len(sizes)} widgets of up to {cell_w}x{cell_h} do not fit in {area}")
    cells = rng.choice(cols * rows, size=len(sizes), replace=False)
    span_w, span_h = area.w // cols, area.h // rows
    rects = []
    for cell, (w, h) in zip(cells, sizes, strict=True):
        row, col = divmod(int(cell), cols)
        x = area.x + col * span_w + int(rng.integers(0, span_w - w + 1))
        y = area.y + row * span_h + int(rng.integers(0, span_h - h + 1))
        rects.append(Rect(x, y, w, h))
    return rects


def stack(rng: np.random.Generator, area: Rect, heights: list[int], gap: int) -> list[int]:
    """Top ``y`` of rows of ``heights`` stacked with ``gap``, the block at a random height.

    Raises:
        ValueError: when the rows are taller than the area.
    """
    total = sum(heights) + gap * (len(heights) - 1)
    if total > area.h:
        raise ValueError(f"rows of {total} px do not fit in {area}")
    y = area.y + int(rng.integers(0, area.h - total + 1))
    tops = []
    for h in heights:
        tops.append(y)
        y += h + gap
    return tops
