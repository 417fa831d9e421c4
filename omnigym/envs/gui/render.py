"""Paint a :class:`~omnigym.envs.gui.screen.Screen` into an RGB screenshot with Pillow.

Text uses DejaVu Sans from the system fonts when present (legible down to the 10 px of
MiniWoB's 160x210 screens), else Pillow's bundled default font at the same size. The
:class:`Theme` gives layout and painting the same sizes, all scaled with the screen.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.widgets import Button, Checkbox, Label, TextField, Widget, Window

FONT_PATHS = (
    Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    Path("/usr/share/fonts/dejavu/DejaVuSans.ttf"),
)
BASE_SIZE = (160, 210)
"""MiniWoB's screen (width, height); sizes scale with the screen relative to it."""
Font = ImageFont.FreeTypeFont | ImageFont.ImageFont

BACKGROUND = (255, 255, 255)
INSTRUCTION_BG = (255, 255, 170)
TEXT = (0, 0, 0)
MUTED = (140, 140, 140)
BORDER = (110, 110, 110)
FOCUS = (30, 100, 230)
BUTTON_BG = (225, 225, 225)


@cache
def load_font(size: int) -> Font:
    """DejaVu Sans at ``size`` pixels, or Pillow's default font when DejaVu is not installed."""
    for path in FONT_PATHS:
        if path.is_file():
            return ImageFont.truetype(str(path), size)
    return ImageFont.load_default(size=size)


class Theme:
    """Sizes for one screen size: font, line height, paddings, instruction bar height."""

    def __init__(self, width: int, height: int) -> None:
        self.scale = min(width / BASE_SIZE[0], height / BASE_SIZE[1])
        self.font_size = max(8, round(10 * self.scale))
        self.font = load_font(self.font_size)
        self.line_height = round(self.font_size * 1.3)
        self.pad = max(2, round(4 * self.scale))
        self.border = max(1, round(self.scale))
        self.instruction_height = round(50 * self.scale)

    def text_width(self, text: str) -> int:
        """Painted width of ``text`` in pixels."""
        return int(np.ceil(self.font.getlength(text)))

    def wrap(self, text: str, width: int) -> list[str]:
        """``text`` broken into lines at most ``width`` pixels wide (at spaces where possible)."""
        lines: list[str] = []
        line = ""
        for word in text.split():
            candidate = f"{line} {word}" if line else word
            if self.text_width(candidate) <= width or not line:
                line = candidate
            else:
                lines.append(line)
                line = word
        return [*lines, line] if line else lines


class Renderer:
    """Paints screens of one size; repaints only when the screen changed since the last frame."""

    def __init__(self, theme: Theme) -> None:
        self.theme = theme
        self._painters: dict[type[Widget], Callable[[ImageDraw.ImageDraw, Widget, bool], None]] = {
            Window: self._window,
            Label: self._label,
            Button: self._button,
            Checkbox: self._checkbox,
            TextField: self._text_field,
        }
        self._cached: tuple[int, int, np.ndarray] | None = None  # (screen serial, version, frame)

    def render(self, screen: Screen) -> np.ndarray:
        """The screenshot. Shape: [height, width, 3], uint8. A fresh array on every call."""
        key = (screen.serial, screen.version)
        if self._cached is None or self._cached[:2] != key:
            self._cached = (*key, self._paint(screen))
        return self._cached[2].copy()

    def _paint(self, screen: Screen) -> np.ndarray:
        image = Image.new("RGB", (screen.width, screen.height), BACKGROUND)
        draw = ImageDraw.Draw(image)
        self._instruction(draw, screen)
        for widget in screen.widgets:
            self._painters[type(widget)](draw, widget, widget is screen.focus)
        return np.asarray(image, dtype=np.uint8)

    def _instruction(self, draw: ImageDraw.ImageDraw, screen: Screen) -> None:
        r, t = screen.instruction_rect, self.theme
        draw.rectangle((r.x, r.y, r.x + r.w - 1, r.y + r.h - 1), fill=INSTRUCTION_BG)
        y = r.y + t.pad
        for line in t.wrap(screen.instruction, r.w - 2 * t.pad):
            if y + t.line_height > r.y + r.h:
                break
            draw.text((r.x + t.pad, y), line, fill=TEXT, font=t.font)
            y += t.line_height

    def _box(
        self, draw: ImageDraw.ImageDraw, widget: Widget, fill: tuple[int, int, int], focused: bool
    ) -> None:
        r, t = widget.rect, self.theme
        outline = FOCUS if focused else BORDER
        width = t.border * 2 if focused else t.border
        draw.rectangle((r.x, r.y, r.x + r.w - 1, r.y + r.h - 1), fill=fill, outline=outline, width=width)

    def _text_left(self, draw: ImageDraw.ImageDraw, x: int, widget: Widget, text: str, fill: tuple) -> None:
        """``text`` from ``x``, vertically centred in the widget."""
        draw.text((x, widget.rect.y + widget.rect.h / 2), text, fill=fill, font=self.theme.font, anchor="lm")

    def _window(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        """Windows are the page background: nothing to paint."""

    def _label(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        self._text_left(draw, widget.rect.x, widget, widget.label, TEXT)

    def _button(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        self._box(draw, widget, BUTTON_BG, focused)
        cx, cy = widget.rect.x + widget.rect.w / 2, widget.rect.y + widget.rect.h / 2
        draw.text((cx, cy), widget.label, fill=TEXT, font=self.theme.font, anchor="mm")

    def _checkbox(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        assert isinstance(widget, Checkbox)
        r, t = widget.rect, self.theme
        side = t.font_size
        x0, y0 = r.x, r.y + (r.h - side) // 2
        outline = FOCUS if focused else BORDER
        draw.rectangle(
            (x0, y0, x0 + side - 1, y0 + side - 1), fill=BACKGROUND, outline=outline, width=t.border
        )
        if widget.checked:  # a tick from the left middle down to the bottom third, up to the top right
            points = [(x0 + side * 0.2, y0 + side * 0.5), (x0 + side * 0.42, y0 + side * 0.75),
                      (x0 + side * 0.8, y0 + side * 0.22)]  # fmt: skip
            draw.line(points, fill=TEXT, width=max(2, t.border * 2))
        self._text_left(draw, x0 + side + t.pad, widget, widget.label, TEXT)

    def _text_field(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        assert isinstance(widget, TextField)
        t = self.theme
        self._box(draw, widget, BACKGROUND, focused)
        x = widget.rect.x + t.pad
        if widget.value:
            shown = widget.shown
            while shown and t.text_width(shown) > widget.rect.w - 3 * t.pad:
                shown = shown[1:]  # long values scroll left, keeping the end (and caret) in view
            self._text_left(draw, x, widget, shown, TEXT)
            x += t.text_width(shown)
        elif widget.placeholder:
            self._text_left(draw, x, widget, widget.placeholder, MUTED)
        if focused:
            top, bottom = widget.rect.y + t.pad, widget.rect.y + widget.rect.h - t.pad - 1
            draw.line([(x + 1, top), (x + 1, bottom)], fill=TEXT, width=t.border)
