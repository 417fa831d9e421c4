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

from omnigym.envs.gui.containers import AppWindow, ListBox, ListItem, ScrollArea, Tab, TabStrip
from omnigym.envs.gui.layers import CloseButton, Dialog, Dropdown, Option, OptionList
from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.widgets import (
    Button,
    Checkbox,
    Draggable,
    DropZone,
    Label,
    RadioButton,
    Slider,
    TextField,
    Widget,
    Window,
)

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
SELECTED_BG = (200, 220, 255)
TRACK = (190, 190, 190)
TITLE_BG = (70, 110, 180)
TITLE_TEXT = (255, 255, 255)
BACKDROP_ALPHA = 0.35
"""How much a modal dialog's backdrop darkens the page behind it."""


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


STAMP_CACHE_SIZE = 4096
"""Glyph masks a renderer keeps (strings x sub-pixel offsets); the cache restarts when full."""


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
            RadioButton: self._radio,
            Dropdown: self._dropdown,
            OptionList: self._option_list,
            Option: self._option,
            Slider: self._slider,
            Dialog: self._dialog,
            CloseButton: self._button,
            TabStrip: self._tab_strip,
            Tab: self._tab,
            DropZone: self._drop_zone,
            Draggable: self._button,
            AppWindow: self._dialog,
            ScrollArea: self._option_list,
            ListBox: self._list_box,
            ListItem: self._list_item,
        }
        self._cached: tuple[int, int, np.ndarray] | None = None  # (screen serial, version, frame)
        self._image = Image.new("RGB", (1, 1))  # the frame being painted
        self._stamps: dict[tuple[str, str, float, float], tuple[Image.Image, int, int]] = {}

    def render(self, screen: Screen) -> np.ndarray:
        """The screenshot. Shape: [height, width, 3], uint8. A fresh array on every call."""
        key = (screen.serial, screen.version)
        if self._cached is None or self._cached[:2] != key:
            self._cached = (*key, self._paint(screen))
        return self._cached[2].copy()

    def _paint(self, screen: Screen) -> np.ndarray:
        image = Image.new("RGB", (screen.width, screen.height), BACKGROUND)
        self._image = image
        draw = ImageDraw.Draw(image)
        self._instruction(draw, screen)
        self._widgets(draw, screen, list(screen.window.walk()))
        for layer in screen.layers:
            if layer.modal:  # darken the page behind a modal dialog
                image = Image.blend(image, Image.new("RGB", image.size, TEXT), BACKDROP_ALPHA)
                self._image = image
                draw = ImageDraw.Draw(image)
            self._widgets(draw, screen, list(layer.walk()))
        return np.asarray(image, dtype=np.uint8)

    def _stamp(self, xy: tuple[float, float], text: str, fill: tuple[int, int, int], anchor: str) -> None:
        """Draw ``text`` at ``xy`` (Pillow's ``anchor``), from a cached glyph mask.

        Rasterising glyphs is most of a frame's cost and screens repeat their labels, so each
        string is rasterised once per sub-pixel offset and pasted through its mask after that.
        """
        x, y = xy
        key = (text, anchor, x - np.floor(x), y - np.floor(y))
        if key not in self._stamps:
            if len(self._stamps) >= STAMP_CACHE_SIZE:
                self._stamps.clear()
            self._stamps[key] = self._rasterise(*key)
        mask, dx, dy = self._stamps[key]
        self._image.paste(fill, (int(np.floor(x)) + dx, int(np.floor(y)) + dy), mask)

    def _rasterise(self, text: str, anchor: str, fx: float, fy: float) -> tuple[Image.Image, int, int]:
        """The mask of ``text`` anchored at ``(fx, fy)`` and where its corner lies from the anchor."""
        left, top, right, bottom = self.theme.font.getbbox(text, anchor=anchor)
        margin = 3  # room for the sub-pixel shift and anti-aliasing past the box
        # the mask's corner lies left of and above both the glyphs and the anchor, so the text is
        # drawn at positive coordinates there: Pillow splits those into pixel and sub-pixel parts
        # exactly as it does on the frame
        x0, y0 = min(int(np.floor(left)), 0) - margin, min(int(np.floor(top)), 0) - margin
        mask = Image.new("L", (int(np.ceil(right)) - x0 + margin, int(np.ceil(bottom)) - y0 + margin), 0)
        ImageDraw.Draw(mask).text((fx - x0, fy - y0), text, fill=255, font=self.theme.font, anchor=anchor)
        return mask, x0, y0

    def _widgets(self, draw: ImageDraw.ImageDraw, screen: Screen, widgets: list[Widget]) -> None:
        for widget in widgets:
            self._painters[type(widget)](draw, widget, widget is screen.focus)

    def _instruction(self, draw: ImageDraw.ImageDraw, screen: Screen) -> None:
        r, t = screen.instruction_rect, self.theme
        draw.rectangle((r.x, r.y, r.x + r.w - 1, r.y + r.h - 1), fill=INSTRUCTION_BG)
        y = r.y + t.pad
        for line in t.wrap(screen.instruction, r.w - 2 * t.pad):
            if y + t.line_height > r.y + r.h:
                break
            self._stamp((r.x + t.pad, y), line, TEXT, "la")
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
        self._stamp((x, widget.rect.y + widget.rect.h / 2), text, fill, "lm")

    def _window(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        """Windows are the page background: nothing to paint."""

    def _label(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        self._text_left(draw, widget.rect.x, widget, widget.label, TEXT)

    def _button(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        self._box(draw, widget, BUTTON_BG, focused)
        cx, cy = widget.rect.x + widget.rect.w / 2, widget.rect.y + widget.rect.h / 2
        self._stamp((cx, cy), widget.label, TEXT, "mm")

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

    def _radio(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        assert isinstance(widget, RadioButton)
        r, t = widget.rect, self.theme
        side = t.font_size
        x0, y0 = r.x, r.y + (r.h - side) // 2
        outline = FOCUS if focused else BORDER
        draw.ellipse((x0, y0, x0 + side - 1, y0 + side - 1), fill=BACKGROUND, outline=outline, width=t.border)
        if widget.checked:
            inset = max(2, side // 4)
            draw.ellipse((x0 + inset, y0 + inset, x0 + side - 1 - inset, y0 + side - 1 - inset), fill=TEXT)
        self._text_left(draw, x0 + side + t.pad, widget, widget.label, TEXT)

    def _dropdown(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        assert isinstance(widget, Dropdown)
        r, t = widget.rect, self.theme
        self._box(draw, widget, BACKGROUND, focused)
        text, fill = (widget.value, TEXT) if widget.selected is not None else (widget.placeholder, MUTED)
        self._text_left(draw, r.x + t.pad, widget, text, fill)
        # a downward (upward when open) triangle at the right end
        side = t.font_size // 2 + 1
        cx, cy = r.x + r.w - t.pad - side // 2 - 1, r.y + r.h // 2
        half = side // 2
        tip, base = (cy + half // 2 + 1, cy - half // 2 - 1)
        if widget.popup is not None:
            tip, base = base, tip
        draw.polygon([(cx - half, base), (cx + half, base), (cx, tip)], fill=TEXT)

    def _option_list(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        self._box(draw, widget, BACKGROUND, False)

    def _option(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        assert isinstance(widget, Option)
        r, t = widget.rect, self.theme
        if widget.states():
            inset = t.border
            draw.rectangle((r.x + inset, r.y, r.x + r.w - 1 - inset, r.y + r.h - 1), fill=SELECTED_BG)
        self._text_left(draw, r.x + t.pad, widget, widget.label, TEXT)

    def _list_box(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        self._box(draw, widget, BACKGROUND, focused)

    def _list_item(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        """A row; the selected one tinted (inside the list's frame)."""
        assert isinstance(widget, ListItem)
        r, t = widget.rect, self.theme
        if widget.states():
            inset = t.border * 2
            draw.rectangle((r.x + inset, r.y, r.x + r.w - 1 - inset, r.y + r.h - 1), fill=SELECTED_BG)
        self._text_left(draw, r.x + t.pad, widget, widget.label, TEXT)

    def _slider(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        """A track across the top half, the thumb at the value and the value written under it."""
        assert isinstance(widget, Slider)
        r, t = widget.rect, self.theme
        thumb_h = r.h - t.line_height
        cy = r.y + thumb_h // 2
        draw.rectangle((r.x, cy - t.border, r.x + r.w - 1, cy + t.border), fill=TRACK)
        x = widget.x_of(widget.value)
        half = max(2, t.pad - 1)
        outline = FOCUS if focused else BORDER
        draw.rectangle(
            (x - half, r.y, x + half, r.y + thumb_h - 1), fill=BUTTON_BG, outline=outline, width=t.border
        )
        text = str(widget.value)
        tx = min(max(x, r.x + t.text_width(text) / 2), r.x + r.w - t.text_width(text) / 2)
        self._stamp((tx, r.y + thumb_h + t.line_height / 2), text, TEXT, "mm")

    def _dialog(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        """A bordered box with a coloured title bar one line high."""
        r, t = widget.rect, self.theme
        self._box(draw, widget, BACKGROUND, False)
        bar = t.line_height + t.pad
        draw.rectangle(
            (r.x, r.y, r.x + r.w - 1, r.y + bar - 1), fill=TITLE_BG, outline=BORDER, width=t.border
        )
        self._stamp((r.x + t.pad, r.y + bar / 2), widget.label, TITLE_TEXT, "lm")

    def _tab_strip(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        """A line along the bottom of the strip, under the tabs."""
        r, t = widget.rect, self.theme
        y = r.y + r.h - t.border
        draw.rectangle((r.x, y, r.x + r.w - 1, r.y + r.h - 1), fill=BORDER)

    def _tab(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        """A grey tab; the selected one white and open at the bottom, joined to its page."""
        assert isinstance(widget, Tab)
        r, t = widget.rect, self.theme
        selected = widget.states() == ["selected"]
        self._box(draw, widget, BACKGROUND if selected else BUTTON_BG, focused)
        if selected and not focused:
            y = r.y + r.h - t.border
            draw.rectangle((r.x + t.border, y, r.x + r.w - 1 - t.border, r.y + r.h - 1), fill=BACKGROUND)
        cx, cy = r.x + r.w / 2, r.y + r.h / 2
        self._stamp((cx, cy), widget.label, TEXT, "mm")

    def _drop_zone(self, draw: ImageDraw.ImageDraw, widget: Widget, focused: bool) -> None:
        """A tinted box with its label in the top-left corner."""
        r, t = widget.rect, self.theme
        self._box(draw, widget, SELECTED_BG, False)
        self._stamp((r.x + t.pad, r.y + t.pad), widget.label, TEXT, "la")
