"""``gui_oracle`` on real MiniWoB++ tasks: their utterance templates and the browser's tree.

The real tasks (``omnigym/MiniWoB-<Task>-v0``, ``docs/envs/gui.md``) word their instructions
differently from the synthetic families ('Click on the "Ok" button.', 'Select 9hx, rd and click
Submit.') and their accessibility tree (``miniwob.accessibility_tree``) names fewer things (text
fields carry no label; a ``<label>`` or ``<th>`` before them does). :func:`solve_miniwob` matches
each template copied from the task's page (``miniwob/html/miniwob/<task>.html``) and acts, like
the synthetic solvers, from the current observation alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from omnigym.envs.gui.oracle import Element, _click, _fill, _find

_CLOSE_LABELS = ("Close", "x", "\u00d7")
"""Names of a dialog's title-bar close button (jQuery UI's is ``"Close"``, drawn as an x)."""
NO_OP = "scroll(0, 0, 0)"
"""An action that sends nothing to the page (a zero scroll)."""
_PAGER = re.compile(r"\d+|[<>\u00ab\u00bb]|Prev|Next|First|Last")
_ORDINAL = r"(\d+)(?:st|nd|rd|th)"


def _button(elements: list[Element], label: str) -> Element:
    """The button named ``label``; a dialog's close button for ``"x"``."""
    if label in _CLOSE_LABELS:
        return next(e for e in elements if e.role == "button" and e.label in _CLOSE_LABELS)
    return _find(elements, "button", label)


def _submit(elements: list[Element]) -> str:
    """Click the form's submit control: its last button, else its last text (a styled ``<div>``)."""
    buttons = [e for e in elements if e.role == "button"]
    return _click(buttons[-1] if buttons else next(e for e in reversed(elements) if e.role == "text"))


def _checkboxes(wanted: str, elements: list[Element]) -> str:
    """Tick exactly the named boxes (or click the named radio), then Submit."""
    targets = set() if wanted == "nothing" else set(wanted.split(", "))
    radios = [e for e in elements if e.role == "radio"]
    if radios:
        radio = _find(radios, "radio", wanted)
        return _click(radio) if "checked" not in radio.states else _click(_find(elements, "button", "Submit"))
    for box in (e for e in elements if e.role == "checkbox"):
        if ("checked" in box.states) != (box.label in targets):
            return _click(box)
    return _click(_find(elements, "button", "Submit"))


def _dropdown(target: str, elements: list[Element]) -> str:
    """Focus the dropdown, type the option's text and Enter (the browser's own list is not in the tree)."""
    dropdown = _find(elements, "combobox")
    if dropdown.value == target:
        return _submit(elements)
    if not dropdown.focused:
        return _click(dropdown)
    # Typing picks the option; the Enter commits it, also when a click has opened the list
    return 'type("{}\\n")'.format(target.replace("\\", "\\\\").replace('"', '\\"'))


def _slider(target: int, elements: list[Element]) -> str:
    """Focus the handle, step with the arrow keys until the shown value is the target, submit."""
    handle = _find(elements, "slider")
    value = next(int(e.label) for e in elements if e.role == "text" and re.fullmatch(r"-?\d+", e.label))
    if value == target:
        return _submit(elements)
    if not handle.focused:
        return _click(handle)
    return 'key("ArrowRight")' if target > value else 'key("ArrowLeft")'


def _textboxes(elements: list[Element]) -> list[Element]:
    return [e for e in elements if e.role == "textbox"]


def _fill_all(pairs: list[tuple[Element, str]], elements: list[Element]) -> str:
    """Fill each field in turn, then submit."""
    for field, target in pairs:
        action = _fill(field, target)
        if action is not None:
            return action
    return _submit(elements)


def _login(user: str, password: str, elements: list[Element]) -> str:
    """Cancel a popup if one is open (its OK fails the task), fill both fields, click the login button."""
    cancel = next((e for e in elements if e.role == "button" and e.label == "Cancel"), None)
    if cancel is not None:
        return _click(cancel)
    boxes = _textboxes(elements)
    secret = next(e for e in boxes if "password" in e.states)
    name = next(e for e in boxes if "password" not in e.states)
    return _fill_all([(name, user), (secret, password)], elements)


def _gap(a: Element, b: Element) -> float:
    """The distance between two boxes (0 when they touch or overlap)."""
    (ax, ay, aw, ah), (bx, by, bw, bh) = a.box, b.box
    dx, dy = max(0, bx - (ax + aw), ax - (bx + bw)), max(0, by - (ay + ah), ay - (by + bh))
    return float((dx * dx + dy * dy) ** 0.5)


_MOVIE_FIELDS = (("genre", 0), ("director", 1), ("name", 1), ("year", 2), ("date", 2))
"""Label keywords of the movie form's fields: genre, director, year."""


def _movie_form(genre: str, director: str, year: str, elements: list[Element]) -> str:
    """Fill each field with what its label names, then submit.

    A field's label is the keyword text nearest it: the layouts put labels left of, above or
    below the fields.
    """
    values = (genre, director, year)
    labels = [
        (e, index)
        for e in elements
        if e.role == "text"
        for word, index in _MOVIE_FIELDS
        if word in e.label.lower()
    ]
    fields = _textboxes(elements)
    chosen = [min(labels, key=lambda pair: _gap(field, pair[0]))[1] for field in fields] if labels else []
    if sorted(chosen) != [0, 1, 2]:
        raise ValueError("gui_oracle: the movie form's fields have no labels it knows")
    return _fill_all([(field, values[index]) for field, index in zip(fields, chosen, strict=True)], elements)


def _search(query: str, position: int, elements: list[Element]) -> str:
    """Search for the query, go to the result's page (3 results a page), click the result."""
    links = [e for e in elements if e.role == "link"]
    pages = [e for e in links if _PAGER.fullmatch(e.label)]
    box, search = _find(elements, "textbox"), _find(elements, "button", "Search")
    if box.value != query or not pages:
        return _fill(box, query) or _click(search)
    results = [e for e in links if e not in pages]
    current = next((int(e.label) for e in pages if "selected" in e.states and e.label.isdigit()), 1)
    size = 3
    page = (position - 1) // size + 1
    if page == current:
        return _click(results[(position - 1) % size])
    link = next((e for e in pages if e.label == str(page)), None)
    return _click(link or _find(pages, "link", ">" if page > current else "<"))


def _tabs_link(target: str, elements: list[Element]) -> str:
    """Click the link if the shown tab has it, else the tab after the selected one."""
    link = next((e for e in elements if e.role == "link" and e.label == target), None)
    if link is not None:
        return _click(link)
    tabs = [e for e in elements if e.role == "tab"]
    current = next((i for i, e in enumerate(tabs) if "selected" in e.states), -1)
    return _click(tabs[(current + 1) % len(tabs)])


def _drag_items(item: str, where: str, elements: list[Element]) -> str:
    """Drag the named list item onto the item at the target position."""
    items = [e for e in elements if e.role == "text"]
    index = [e.label for e in items].index(item)
    moves = {"to the top.": 0, "to the bottom.": len(items) - 1, "down by one position.": index + 1}
    moves["up by one position."] = index - 1
    ordinal = re.fullmatch(f"to the {_ORDINAL} position.", where)
    target = int(ordinal.group(1)) - 1 if ordinal else moves[where]
    (x1, y1), (x2, y2) = items[index].center, items[target].center
    y2 += 4 if target > index else -4  # past the target's middle, so the list reorders
    return f"drag({x1}, {y1}, {x2}, {y2})"


_Solver = Callable[[re.Match[str], list[Element]], str]
TEMPLATES: list[tuple[re.Pattern[str], _Solver]] = [
    (re.compile(r'Click on the "(.*)" button\.'), lambda m, els: _click(_find(els, "button", m[1]))),
    (re.compile(r'Click on the link "(.*)"\.'), lambda m, els: _click(_find(els, "link", m[1]))),
    (re.compile(r"Click on (Tab #\d+)\."), lambda m, els: _click(_find(els, "tab", m[1]))),
    (
        re.compile(r'Switch between the tabs to find and click on the link "(.*)"\.'),
        lambda m, els: _tabs_link(m[1], els),
    ),
    (re.compile(r"Select (.*) from the list and click Submit\."), lambda m, els: _dropdown(m[1], els)),
    (re.compile(r"Select (-?\d+) with the slider and hit Submit\."), lambda m, els: _slider(int(m[1]), els)),
    (re.compile(r'Select ([^"]*) and click Submit\.'), lambda m, els: _checkboxes(m[1], els)),
    (
        re.compile(r'Enter "(.*)" into the text field and press Submit\.'),
        lambda m, els: _fill_all([(_find(els, "textbox"), m[1])], els),
    ),
    (
        re.compile(r'Type "(.*)" in all (upper|lower) case letters in the text input and press Submit\.'),
        lambda m, els: _fill_all(
            [(_find(els, "textbox"), m[1].upper() if m[2] == "upper" else m[1].lower())], els
        ),
    ),
    (
        re.compile(r'Enter the password "(.*)" into both text fields and press submit\.'),
        lambda m, els: _fill_all([(box, m[1]) for box in _textboxes(els)], els),
    ),
    (re.compile(r"Focus into the textbox\."), lambda m, els: _click(_find(els, "textbox"))),
    (
        re.compile(f"Focus into the {_ORDINAL} input textbox\\."),
        lambda m, els: _click(_textboxes(els)[int(m[1]) - 1]),
    ),
    (
        re.compile(
            r'Enter the username "(.*)" and the password "(.*)" into the text fields and press login\.'
        ),
        lambda m, els: _login(m[1], m[2], els),
    ),
    (
        re.compile(r'Close the dialog box by clicking the "x"\.'),
        lambda m, els: _click(_button(els, "x")),
    ),
    (
        re.compile(r'Click the button in the dialog box labeled "(.*)"\.'),
        lambda m, els: _click(_button(els, m[1])),
    ),
    (
        re.compile(r"Search for (.*) movies directed by (.*) from year (\d+)\."),
        lambda m, els: _movie_form(m[1], m[2], m[3], els),
    ),
    (
        re.compile(
            f'Use the textbox to enter "(.*)" and press "Search", then find and click the {_ORDINAL} '
            r"search result\."
        ),
        lambda m, els: _search(m[1], int(m[2]), els),
    ),
    (
        re.compile(
            r"Drag (.*) (to the (?:top|bottom)\.|(?:down|up) by one position\.|to the \d+\w\w position\.)"
        ),
        lambda m, els: _drag_items(m[1], m[2], els),
    ),
]
"""Each real task's utterance template (a regex over the whole instruction) and its solver. None
matches a synthetic family's instruction but ``Select nothing and click Submit.``, which both
ClickCheckboxes tasks use alike (untick every box, click Submit)."""


def solve_miniwob(instruction: str, elements: list[Element]) -> str | None:
    """The next action for a real MiniWoB++ utterance; None when no real template matches."""
    for pattern, solver in TEMPLATES:
        match = pattern.fullmatch(instruction)
        if match is not None:
            if all(e.role == "window" for e in elements):
                return NO_OP  # the page has ended the episode (its terminal observation)
            return solver(match, elements)
    return None
