"""The renderer's cached glyph masks paint exactly what Pillow's text drawing paints."""

import numpy as np
import pytest
from PIL import Image, ImageDraw

from omnigym.envs.gui.render import Renderer, Theme


@pytest.mark.parametrize("size", [(160, 210), (512, 512)])
def test_stamped_text_equals_pillow_text(size):
    theme = Theme(*size)
    renderer = Renderer(theme)
    rng = np.random.default_rng(0)
    for text in ("Submit", "Log in", "alice", "ab, 12.-", "W"):
        for anchor in ("la", "lm", "mm"):
            for _ in range(3):  # sub-pixel positions differ in how glyphs are rasterised
                xy = (float(rng.uniform(5, size[0] - 60)), float(rng.uniform(5, size[1] - 20)))
                colour = tuple(int(c) for c in rng.integers(0, 200, 3))
                direct = Image.new("RGB", size, (255, 255, 255))
                ImageDraw.Draw(direct).text(xy, text, fill=colour, font=theme.font, anchor=anchor)
                for _ in range(2):  # rasterised, then from the cache
                    renderer._image = Image.new("RGB", size, (255, 255, 255))
                    renderer._stamp(xy, text, colour, anchor)
                    np.testing.assert_array_equal(np.asarray(renderer._image), np.asarray(direct))
