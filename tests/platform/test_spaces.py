"""Spaces survive a strict-JSON round trip (saved policies record the spaces they were built for)."""

import json

import numpy as np
import pytest
from gymnasium import spaces

from omnigym.core.spaces import space_from_json, space_to_json

SPACES = [
    spaces.Box(-np.inf, np.inf, (2, 3), np.float32),
    spaces.Box(0, 255, (4, 4, 3), np.uint8),
    spaces.Box(np.array([-1.0, 0.0]), np.array([2.0, np.inf]), dtype=np.float64),
    spaces.Discrete(5, start=2),
    spaces.MultiDiscrete([3, 4]),
    spaces.MultiBinary(6),
    spaces.Text(max_length=32),
    spaces.Text(max_length=512, min_length=1, charset="abc .,:()/-0123456789"),  # e.g. the driving text
    spaces.Dict({"state": spaces.Box(-1, 1, (3,)), "text": spaces.Text(16)}),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_round_trip_through_strict_json(space):
    text = json.dumps(space_to_json(space), allow_nan=False)  # raises on NaN/Infinity literals
    assert space_from_json(json.loads(text)) == space


def test_text_charset_survives_so_saved_policies_accept_the_same_strings():
    space = spaces.Text(max_length=64, charset="ab .,")
    again = space_from_json(json.loads(json.dumps(space_to_json(space))))
    assert again.contains("ab ba, a.") and not again.contains("abc")


def test_text_saved_without_a_charset_loads_with_the_default():
    assert space_from_json({"type": "Text", "max_length": 8}) == spaces.Text(max_length=8)


def test_unknown_space_type_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown space type 'Sphere'"):
        space_from_json({"type": "Sphere"})
