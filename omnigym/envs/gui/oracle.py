"""``gui_oracle``: a scripted solver of every synthetic GUI family, acting like a text agent.

It solves the real MiniWoB++ counterparts too (``oracle_miniwob.py``: their utterance templates).

It reads only the ``text`` observation (the instruction and the accessibility tree, with
``accessibility_tree=True``, the default) and writes actions in the grammar of ``actions.py``:
it clicks the centre of the boxes the tree reports. Each action is a function of the current
observation alone (which boxes are ticked, what the fields hold, what has focus), so the oracle
keeps no memory and recovers from any state a task can be in. A password field reports its
value masked, so the oracle trusts a masked value of the right length to be its own typing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import OBS_TEXT, Obs, PolicyStep

_ELEMENT = re.compile(r'\[(\d+)\] (\w+) "((?:[^"\\]|\\.)*)" \((-?\d+), (-?\d+), (\d+), (\d+)\)(.*)')
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")


def _unescape(text: str) -> str:
    return _ESCAPE.sub(r"\1", text)


@dataclass(frozen=True)
class Element:
    """One accessibility-tree line."""

    role: str
    label: str
    center: tuple[int, int]
    states: tuple[str, ...]
    value: str = ""
    box: tuple[int, int, int, int] = (0, 0, 0, 0)
    """``(x, y, w, h)`` as the tree reports it."""

    @property
    def focused(self) -> bool:
        """Whether the element has keyboard focus."""
        return "focused" in self.states


def parse_observation(text: str) -> tuple[str, list[Element]]:
    """The instruction and the elements of a GUI env's ``text`` observation."""
    lines = text.splitlines()
    instruction = lines[0].removeprefix("instruction: ") if lines else ""
    elements = []
    for line in lines[1:]:
        match = _ELEMENT.fullmatch(line)
        if match is None:
            continue
        _, role, label, x, y, w, h, rest = match.groups()
        value = _QUOTED.search(rest)
        states = tuple(_QUOTED.sub("", rest).split())
        elements.append(
            Element(
                role=role,
                label=_unescape(label),
                center=(int(x) + int(w) // 2, int(y) + int(h) // 2),
                states=states,
                value=_unescape(value.group(1)) if value else "",
                box=(int(x), int(y), int(w), int(h)),
            )
        )
    return instruction, elements


def _click(element: Element) -> str:
    return f"click({element.center[0]}, {element.center[1]})"


def _find(elements: list[Element], role: str, label: str | None = None) -> Element:
    for element in elements:
        if element.role == role and (label is None or element.label == label):
            return element
    raise ValueError(f"gui_oracle: no {role} {label or ''!r} on the screen")


def _fill(field: Element, target: str) -> str | None:
    """The next action towards ``field`` holding ``target``; None when it does."""
    masked = "password" in field.states
    done = len(field.value) == len(target) if masked else field.value == target
    if done:
        return None
    if not field.focused:
        return _click(field)
    typed_ok = len(field.value) < len(target) if masked else target.startswith(field.value)
    if typed_ok:
        rest = target[len(field.value) :].replace("\\", "\\\\").replace('"', '\\"')
        return f'type("{rest}")'
    return 'key("Backspace")'


def _attribute(element: Element, name: str) -> int:
    """The integer of a ``name=...`` state (a slider's ``min``/``max``)."""
    return int(next(s for s in element.states if s.startswith(f"{name}=")).removeprefix(f"{name}="))


def _select(elements: list[Element], target: str) -> str:
    """The next action towards option ``target`` of the radio group or dropdown, then Submit."""
    radios = [e for e in elements if e.role == "radio"]
    if radios:
        radio = _find(elements, "radio", target)
        if "checked" not in radio.states:
            return _click(radio)
    else:
        options = [e for e in elements if e.role == "option"]
        if options:  # the list is open: pick the target
            return _click(_find(options, "option", target))
        dropdown = _find(elements, "combobox")
        if dropdown.value != target:
            return _click(dropdown)  # opens the list
    return _click(_find(elements, "button", "Submit"))


def _slide(elements: list[Element], target: int) -> str:
    """Drag the slider's thumb to the target's column, fix the rest with arrow keys, submit."""
    slider = _find(elements, "slider")
    value, low, high = int(slider.value), _attribute(slider, "min"), _attribute(slider, "max")
    if value == target:
        return _click(_find(elements, "button", "Submit"))
    x, _, w, _ = slider.box
    if slider.focused and abs(target - value) <= 3:
        return 'key("ArrowRight")' if target > value else 'key("ArrowLeft")'
    y = slider.center[1]
    start, end = (x + round((v - low) / (high - low) * (w - 1)) for v in (value, target))
    return f"drag({start}, {y}, {end}, {y})"


def _close_dialog(elements: list[Element], label: str) -> str:
    """Click the open dialog's button (the first button after it in the tree), then the target."""
    dialogs = [i for i, e in enumerate(elements) if e.role == "dialog"]
    if dialogs:
        return _click(_find(elements[dialogs[-1] :], "button"))
    return _click(_find(elements, "button", label))


_PAIR = re.compile(r'(\w+) "((?:[^"\\]|\\.)*)"')
_ORDINAL = re.compile(r"the (\d+)\w\w result")


def _fill_form(instruction: str, elements: list[Element]) -> str:
    """Set each named field (text, ``yes``/``no`` checkbox, dropdown option) in turn, then Submit."""
    wanted = {label: _unescape(value) for label, value in _PAIR.findall(instruction)}
    options = [e for e in elements if e.role == "option"]
    if options:  # a dropdown's list is open: pick its wanted option
        dropdown = _find(elements, "combobox")
        return _click(_find(options, "option", wanted[dropdown.label]))
    for label, target in wanted.items():
        field = next(
            e for e in elements if e.label == label and e.role in ("textbox", "checkbox", "combobox")
        )
        if field.role == "textbox":
            action = _fill(field, target)
            if action is not None:
                return action
        elif field.role == "checkbox":
            if ("checked" in field.states) != (target == "yes"):
                return _click(field)
        elif field.value != target:
            return _click(field)  # opens the list
    return _click(_find(elements, "button", "Submit"))


def _search_and_click(instruction: str, quoted: list[str], elements: list[Element]) -> str:
    """Type the query, search, then click the named result (by position or title)."""
    query = quoted[0]
    results = [e for e in elements if e.role == "button" and e.label != "Search"]
    if results and all(e.label.startswith(f"{query} ") for e in results):
        ordinal = _ORDINAL.search(instruction)
        if ordinal is not None:
            return _click(results[int(ordinal.group(1)) - 1])
        return _click(_find(results, "button", quoted[1]))
    action = _fill(_find(elements, "textbox", "Search"), query)
    return action or _click(_find(elements, "button", "Search"))


def _navigate_tabs(quoted: list[str], elements: list[Element]) -> str:
    """Click the named tab unless it is selected, then the named button of its page."""
    tab = _find(elements, "tab", quoted[0])
    if "selected" not in tab.states:
        return _click(tab)
    return _click(_find(elements, "button", quoted[1]))


def _drag_item(quoted: list[str], elements: list[Element]) -> str:
    """Drag the named item from its centre to the centre of the named area."""
    (x1, y1), (x2, y2) = (
        _find(elements, "draggable", quoted[0]).center,
        _find(elements, "region", quoted[1]).center,
    )
    return f"drag({x1}, {y1}, {x2}, {y2})"


_STEP = re.compile(r'(Notes|Settings|Mail): (type|tick|untick) "((?:[^"\\]|\\.)*)"')
_FINAL = re.compile(r'then click "((?:[^"\\]|\\.)*)" in (\w+)\.$')


def _windows(elements: list[Element]) -> list[tuple[Element, list[Element]]]:
    """Each titled window (tree order = paint order, front last) with the elements inside it."""
    groups: list[tuple[Element, list[Element]]] = []
    for element in elements:
        if element.role == "window" and element.label:
            groups.append((element, []))
        elif groups:
            groups[-1][1].append(element)
    return groups


def _raise(groups: list[tuple[Element, list[Element]]], index: int) -> str:
    """Click a point of window ``index``'s title row that no window in front of it covers."""
    x0, y0, w, _ = groups[index][0].box
    above = [g[0].box for g in groups[index + 1 :]]
    y = y0 + 2
    for x in range(x0 + 2, x0 + w - 2):
        if not any(bx <= x < bx + bw and by <= y < by + bh for bx, by, bw, bh in above):
            return f"click({x}, {y})"
    raise ValueError("gui_oracle: the window's title bar is covered")


def _multi_window(instruction: str, elements: list[Element]) -> str:
    """Do each step in its window (raising the window first), then click the final button."""
    groups = _windows(elements)
    titles = [g[0].label for g in groups]
    for title, verb, target in _STEP.findall(instruction):
        index = titles.index(_unescape(title))
        window, inside = groups[index]
        front = "front" in window.states
        if verb == "type":
            field = _find(inside, "textbox")
            action = _fill(field, _unescape(target))
            if action is None:
                continue
            if not front:
                return _raise(groups, index)
            return action
        box = _find(inside, "checkbox", _unescape(target))
        if ("checked" in box.states) != (verb.lower() == "tick"):
            return _click(box) if front else _raise(groups, index)
    final = _FINAL.search(instruction)
    assert final is not None
    index = titles.index(_unescape(final.group(2)))
    if "front" not in groups[index][0].states:
        return _raise(groups, index)
    return _click(_find(groups[index][1], "button", _unescape(final.group(1))))


def solve(text: str) -> str:
    """The oracle's next action for one ``text`` observation (a synthetic family or a real MiniWoB++ task).

    Raises:
        ValueError: when the instruction is of no known family or the tree lacks an element.
    """
    from omnigym.envs.gui.oracle_miniwob import solve_miniwob  # imports this module: not at the top

    instruction, elements = parse_observation(text)
    real = solve_miniwob(instruction, elements)  # a real MiniWoB++ task's utterance
    if real is not None:
        return real
    quoted = [_unescape(q) for q in _QUOTED.findall(instruction)]
    if instruction.startswith("Click the button"):
        return _click(_find(elements, "button", quoted[0]))
    if instruction.startswith("Select"):
        wanted = set(quoted)
        for box in (e for e in elements if e.role == "checkbox"):
            if ("checked" in box.states) != (box.label in wanted):
                return _click(box)
        return _click(_find(elements, "button", "Submit"))
    if instruction.startswith("Enter"):
        action = _fill(_find(elements, "textbox"), quoted[0])
        return action or _click(_find(elements, "button", "Submit"))
    if instruction.startswith("Log in"):
        for label, target in zip(("Username", "Password"), quoted, strict=True):
            action = _fill(_find(elements, "textbox", label), target)
            if action is not None:
                return action
        return _click(_find(elements, "button", "Login"))
    if instruction.startswith("Choose"):
        return _select(elements, quoted[0])
    if instruction.startswith("Set the slider to"):
        return _slide(elements, int(instruction.removeprefix("Set the slider to").split()[0]))
    if instruction.startswith("Close the dialog"):
        return _close_dialog(elements, quoted[0])
    if instruction.startswith("Fill:"):
        return _fill_form(instruction, elements)
    if instruction.startswith("Search for"):
        return _search_and_click(instruction, quoted, elements)
    if instruction.startswith("Switch to the"):
        return _navigate_tabs(quoted, elements)
    if _STEP.match(instruction):
        return _multi_window(instruction, elements)
    if instruction.startswith("Drag"):
        return _drag_item(quoted, elements)
    raise ValueError(f"gui_oracle: no solver for the instruction {instruction!r}")


@dataclass
class GUIOracleConfig(PolicyConfig):
    """``gui_oracle`` has no settings."""

    type: str = "gui_oracle"


class GUIOracle(Policy):
    """Solves every synthetic GUI family from the ``text`` observation; deterministic either way."""

    name: ClassVar[str] = "gui_oracle"
    config_class: ClassVar[type[PolicyConfig]] = GUIOracleConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Text,)
    env_kwargs: ClassVar[dict[str, Any]] = {"accessibility_tree": True}

    def __init__(
        self, config: PolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if not isinstance(observation_space.spaces.get(OBS_TEXT), spaces.Text):
            raise ValueError("gui_oracle reads the GUI env's 'text' observation (instruction + tree)")
        if not isinstance(action_space, spaces.Text):
            raise ValueError(f"gui_oracle acts in a Text action space, not {action_space}")

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """One action text per observation; ``action`` is a list of ``str``."""
        texts: Any = obs[OBS_TEXT]
        rows = [texts] if isinstance(texts, str) else list(np.asarray(texts, dtype=object).reshape(-1))
        actions = [solve(str(text)) for text in rows]
        batch = len(actions)
        return PolicyStep(
            action=actions, logprob=torch.zeros(batch, 1), mask=torch.ones(batch, 1, dtype=torch.bool)
        )
