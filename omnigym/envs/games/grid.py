"""What the grid games share: the four moves, their grammar, board text and shortest paths.

A grid game (Sokoban, Maze, FrozenLake) keeps its board as a ``uint8 [rows, cols]`` array of
*cells*, each a small set of bit flags (``WALL | TARGET``, ``PLAYER``...). Lookup tables indexed
by the cell value give its text character, its tile code and its one-hot channels, so turning a
board into text, an image or a state vector is one array lookup, and :func:`parse_board` turns
the text back into the same array (the solvers read the board from the ``text`` observation).

Moves are numbered ``up, down, left, right`` (:data:`DIRECTIONS`) in every grid game, so one
:func:`direction_grammar` reads them all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from omnigym.core.text_actions import WordGrammar
from omnigym.envs.games.base import GameConfig, GameEnv
from omnigym.envs.games.tiles import TileSheet

DIRECTIONS = ("up", "down", "left", "right")
"""The discrete moves of every grid game, by action index."""
DELTAS = ((-1, 0), (1, 0), (0, -1), (0, 1))
"""``(d_row, d_col)`` of each move (row 0 is the top of the board)."""
DIRECTION_ALIASES = {
    **{word[0]: word for word in DIRECTIONS},
    "north": "up",
    "south": "down",
    "west": "left",
    "east": "right",
    **{f"{verb} {word}": word for verb in ("move", "go", "walk", "push") for word in DIRECTIONS},
}
"""Other spellings the grammar accepts: ``u/d/l/r``, compass points, ``move up``, ``go left``..."""
BOARD_HEADER = "board:"
"""The line that precedes the board rows in a grid game's state text."""


def direction_grammar(max_actions: int = 1) -> WordGrammar:
    """The ``up | down | left | right`` grammar (with :data:`DIRECTION_ALIASES`).

    Args:
        max_actions: most moves one text answer may list (applied in order).
    """
    return WordGrammar(DIRECTIONS, DIRECTION_ALIASES, max_actions=max_actions)


def flat_offsets(cols: int) -> tuple[int, ...]:
    """Each move as an offset into a board flattened row by row (``cols`` columns)."""
    return tuple(d_row * cols + d_col for d_row, d_col in DELTAS)


def lookup_table(values: Mapping[int, int], default: int, size: int = 256) -> np.ndarray:
    """A ``uint8 [size]`` table: ``values[cell]`` where given, ``default`` elsewhere."""
    table = np.full(size, default, np.uint8)
    for cell, value in values.items():
        table[cell] = value
    return table


def char_table(chars: Mapping[int, str], default: str = "?") -> np.ndarray:
    """A lookup table from cell value to the ASCII code of its text character."""
    return lookup_table({cell: ord(char) for cell, char in chars.items()}, ord(default))


def board_text(cells: np.ndarray, chars: np.ndarray) -> str:
    """The board as text: one line per row, one character per cell.

    Args:
        cells: uint8 cell values. Shape: [rows, cols].
        chars: a :func:`char_table`.
    """
    rows = cells.shape[0]
    codes = np.empty((rows, cells.shape[1] + 1), np.uint8)
    codes[:, :-1] = chars[cells]
    codes[:, -1] = ord("\n")
    return codes.tobytes()[:-1].decode("ascii")


def board_lines(text: str, alphabet: str) -> list[str]:
    """The board rows of a state text.

    The rows are the lines after a ``board:`` line when there is one (else from the start)
    that are non-empty and made only of ``alphabet``'s characters; they end at the first other
    line. Rows may be surrounded by spaces.

    Raises:
        ValueError: no board, or rows of different lengths.
    """
    lines = text.split("\n")
    header = [i for i, line in enumerate(lines) if line.strip() == BOARD_HEADER]
    start = header[0] + 1 if header else 0
    allowed = set(alphabet)
    rows: list[str] = []
    for line in lines[start:]:
        row = line.strip()
        if row and set(row) <= allowed:
            rows.append(row)
        elif rows or header:
            break
    if not rows:
        raise ValueError(f"no board (rows of {alphabet!r}) in the state text")
    if len({len(row) for row in rows}) != 1:
        raise ValueError(f"board rows have different lengths: {sorted({len(row) for row in rows})}")
    return rows


def parse_board(text: str, legend: Mapping[str, int]) -> np.ndarray:
    """The cells of the board in a state text (the inverse of :func:`board_text`).

    Args:
        text: a state text holding the board (see :func:`board_lines`).
        legend: cell value of each board character.

    Returns:
        uint8 cell values. Shape: [rows, cols].

    Raises:
        ValueError: no rectangular board of ``legend`` characters in ``text``.
    """
    rows = board_lines(text, "".join(legend))
    table = lookup_table({ord(char): value for char, value in legend.items()}, 0)
    codes = np.frombuffer("".join(rows).encode("ascii"), np.uint8)
    return table[codes].reshape(len(rows), len(rows[0]))


def bit_planes(cells: np.ndarray, bits: tuple[int, ...]) -> np.ndarray:
    """The one-hot ``state`` vector: one channel per flag in ``bits``, channels last, flattened.

    Returns:
        float32 0/1 values. Shape: [rows * cols * len(bits)].
    """
    flags = np.asarray(bits, np.uint8)
    return ((cells.reshape(-1, 1) & flags) != 0).astype(np.float32).reshape(-1)


def is_walled(cells: np.ndarray, wall: int) -> bool:
    """Whether every cell of the outer ring has the ``wall`` flag (moves then never leave the board)."""
    border = np.concatenate([cells[0], cells[-1], cells[:, 0], cells[:, -1]])
    return bool(np.all(border & wall))


def pad_board(cells: np.ndarray, value: int) -> np.ndarray:
    """``cells`` inside a one-cell border of ``value`` (a wall), so moves never leave the array."""
    return np.pad(cells, 1, constant_values=value)


def bfs_distances(open_cells: np.ndarray, source: tuple[int, int]) -> np.ndarray:
    """Fewest moves from ``source`` to every cell through open cells (breadth-first search).

    Args:
        open_cells: bool, True where one may stand. Shape: [rows, cols].
        source: ``(row, col)`` to start from (counted as open).

    Returns:
        int32 distances, -1 where unreachable. Shape: [rows, cols].
    """
    rows, cols = open_cells.shape
    distance = np.full((rows, cols), -1, np.int32)
    distance[source] = 0
    queue = deque([source])
    while queue:
        row, col = queue.popleft()
        step = distance[row, col] + 1
        for d_row, d_col in DELTAS:
            r, c = row + d_row, col + d_col
            if 0 <= r < rows and 0 <= c < cols and open_cells[r, c] and distance[r, c] < 0:
                distance[r, c] = step
                queue.append((r, c))
    return distance


def first_move(distance_to_goal: np.ndarray, start: tuple[int, int]) -> int:
    """The first move of a shortest path: the first direction whose cell is one step closer.

    Args:
        distance_to_goal: :func:`bfs_distances` from the goal. Shape: [rows, cols].
        start: ``(row, col)`` to move from.

    Raises:
        ValueError: the goal cannot be reached from ``start``, or ``start`` is the goal.
    """
    here = int(distance_to_goal[start])
    if here <= 0:
        raise ValueError("the goal is unreachable" if here < 0 else "already at the goal")
    rows, cols = distance_to_goal.shape
    for action, (d_row, d_col) in enumerate(DELTAS):
        r, c = start[0] + d_row, start[1] + d_col
        if 0 <= r < rows and 0 <= c < cols and distance_to_goal[r, c] == here - 1:
            return action
    raise AssertionError("a BFS distance map always has a closer neighbour")  # pragma: no cover


@dataclass
class GridGameConfig(GameConfig):
    """Options every grid game has; each game sets its own defaults."""

    size: int = 6
    """Side of the square board in cells."""
    tile_size: int = 16
    """Pixels per cell side of the ``image``."""
    max_actions_per_step: int = 1
    """Moves one text action may list (applied in order)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("tile_size", "max_actions_per_step"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def side(self) -> int:
        """Side of the board in cells."""
        return self.size


class GridGameEnv(GameEnv):
    """A game on a square board of bit-flag cells, played with ``up | down | left | right``.

    The board, its image (a :class:`TileSheet` lookup), its text rows and its one-hot ``state``
    are the same code for every grid game. Subclasses set the lookup tables ``tile_codes`` (cell ->
    tile), ``char_codes`` (cell -> character, a :func:`char_table`) and ``state_bits`` (the
    ``state`` channels), and keep the board in ``self._cells`` (flat, row by row) with its tile
    sheet in ``self._sheet``.
    """

    has_state: ClassVar[bool] = True
    tile_codes: ClassVar[np.ndarray]
    char_codes: ClassVar[np.ndarray]
    state_bits: ClassVar[tuple[int, ...]]
    config: GridGameConfig
    _cells: np.ndarray
    _sheet: TileSheet

    def make_grammar(self) -> WordGrammar:
        """``up | down | left | right`` (aliases in :data:`DIRECTION_ALIASES`)."""
        return direction_grammar(self.config.max_actions_per_step)

    def image_shape(self) -> tuple[int, int, int]:
        """``(side * tile_size, side * tile_size, 3)``."""
        pixels = self.config.side * self.config.tile_size
        return (pixels, pixels, 3)

    def state_size(self) -> int:
        """``side * side`` cells times one channel per flag in ``state_bits``."""
        return self.config.side**2 * len(self.state_bits)

    def board(self) -> np.ndarray:
        """The board's cell values. Shape: [side, side]."""
        side = self.config.side
        return self._cells.reshape(side, side)

    def draw(self) -> np.ndarray:
        """The board, one tile per cell."""
        return self._sheet.draw(self.tile_codes[self.board()])

    def board_rows(self) -> str:
        """The board as text, one line per row (no header)."""
        return board_text(self.board(), self.char_codes)

    def state_vector(self) -> np.ndarray:
        """One-hot channels, one per flag in ``state_bits``, per cell, flattened."""
        return bit_planes(self.board(), self.state_bits)
