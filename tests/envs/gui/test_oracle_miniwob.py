"""``gui_oracle`` on the real MiniWoB++ tasks' instructions: crafted trees, no browser needed.

Each case is one of the pages' utterance templates (checked against the installed pages below)
with an accessibility tree in the adapter's line format, and the action the oracle must write.
"""

from __future__ import annotations

import pytest


def _tree(*lines: str) -> str:
    rows = ['window "" (0, 0, 160, 210)', *lines]
    return "elements:\n" + "\n".join(f"[{i}] {row}" for i, row in enumerate(rows))


def _solve(instruction: str, *lines: str) -> str:
    from omnigym.envs.gui.oracle import solve

    return solve(f"instruction: {instruction}\n" + _tree(*lines))


SUBMIT = 'button "Submit" (2, 100, 96, 30)'
"""Centre (50, 115)."""


@pytest.mark.parametrize(
    ("instruction", "lines", "action"),
    [
        # click-button / click-link / click-tab
        (
            'Click on the "Ok" button.',
            ['button "No" (2, 50, 30, 20)', 'button "Ok" (40, 50, 30, 20)'],
            "click(55, 60)",
        ),
        (
            'Click on the link "nam".',
            ['link "justo." (36, 52, 24, 11)', 'link "nam" (75, 85, 20, 10)'],
            "click(85, 90)",
        ),
        (
            "Click on Tab #2.",
            ['tab "Tab #1" (7, 58, 40, 24) selected', 'tab "Tab #2" (51, 58, 40, 24)'],
            "click(71, 70)",
        ),
        # click-tab-2: the link is not on the shown tab -> the tab after the selected one
        (
            'Switch between the tabs to find and click on the link "euismod.".',
            [
                'tab "Tab #1" (7, 58, 40, 24) selected',
                'tab "Tab #2" (51, 58, 40, 24)',
                'link "nam" (19, 159, 20, 10)',
            ],
            "click(71, 70)",
        ),
        (
            'Switch between the tabs to find and click on the link "euismod.".',
            [
                'tab "Tab #1" (7, 58, 40, 24)',
                'tab "Tab #2" (51, 58, 40, 24) selected',
                'link "euismod." (19, 159, 40, 10)',
            ],
            "click(39, 164)",
        ),
        # click-checkboxes (+ large, transfer): tick the wrong-state box, then Submit
        (
            "Select 9hx, rd and click Submit.",
            [
                'checkbox "9hx" (6, 55, 20, 14) checked',
                'checkbox "q" (6, 74, 20, 14) unchecked',
                'checkbox "rd" (6, 93, 20, 14) unchecked',
                SUBMIT,
            ],
            "click(16, 100)",
        ),
        (
            "Select nothing and click Submit.",
            ['checkbox "AU" (6, 55, 20, 14) checked', SUBMIT],
            "click(16, 62)",
        ),
        ("Select AU and click Submit.", ['checkbox "AU" (6, 55, 20, 14) checked', SUBMIT], "click(50, 115)"),
        # click-option: the same template over radio buttons
        (
            "Select GDKkQ and click Submit.",
            ['radio "USa" (7, 55, 20, 14) unchecked', 'radio "GDKkQ" (7, 73, 20, 14) unchecked', SUBMIT],
            "click(17, 80)",
        ),
        # choose-list: focus the dropdown, then type the option and Enter
        (
            "Select Bobine from the list and click Submit.",
            ['combobox "" (2, 57, 150, 20) value="Ann"', SUBMIT],
            "click(77, 67)",
        ),
        (
            "Select Bobine from the list and click Submit.",
            ['combobox "" (2, 57, 150, 20) value="Ann" focused', SUBMIT],
            'type("Bobine\\n")',
        ),
        (
            "Select Bobine from the list and click Submit.",
            ['combobox "" (2, 57, 150, 20) value="Bobine" focused', SUBMIT],
            "click(50, 115)",
        ),
        # use-slider: focus the handle, then arrow keys towards the value shown beside it
        (
            "Select -97 with the slider and hit Submit.",
            ['slider "" (8, 77, 14, 14)', 'text "-90" (28, 114, 14, 11)', SUBMIT],
            "click(15, 84)",
        ),
        (
            "Select -97 with the slider and hit Submit.",
            ['slider "" (8, 77, 14, 14) focused', 'text "-90" (28, 114, 14, 11)', SUBMIT],
            'key("ArrowLeft")',
        ),
        (
            "Select 16 with the slider and hit Submit.",
            ['slider "" (8, 77, 14, 14) focused', 'text "16" (28, 114, 14, 11)', SUBMIT],
            "click(50, 115)",
        ),
        # enter-text (+ dynamic), enter-text-2, enter-password
        (
            'Enter "Kasey" into the text field and press Submit.',
            ['textbox "" (5, 56, 128, 22) value="Kasey" focused', SUBMIT],
            "click(50, 115)",
        ),
        (
            'Enter "Kasey" into the text field and press Submit.',
            ['textbox "" (5, 56, 128, 22) value="Ka" focused', SUBMIT],
            'type("sey")',
        ),
        (
            'Type "JERALD" in all lower case letters in the text input and press Submit.',
            ['textbox "" (5, 56, 128, 22) value="" focused', SUBMIT],
            'type("jerald")',
        ),
        (
            'Enter the password "fU" into both text fields and press submit.',
            [
                'textbox "" (7, 78, 108, 22) value="**" password',
                'textbox "" (7, 130, 108, 22) value="" password',
                SUBMIT,
            ],
            "click(61, 141)",
        ),
        # focus-text, focus-text-2
        ("Focus into the textbox.", ['textbox "" (5, 82, 128, 22) value=""'], "click(69, 93)"),
        (
            "Focus into the 2nd input textbox.",
            ['textbox "" (9, 62, 128, 22) value=""', 'textbox "" (14, 103, 128, 22) value=""'],
            "click(78, 114)",
        ),
        # login-user (+ popup): username into the plain field, password into the masked one
        (
            'Enter the username "vina" and the password "US" into the text fields and press login.',
            [
                'textbox "" (7, 78, 128, 22) value="vina"',
                'textbox "" (7, 130, 108, 22) value="" password',
                'button "Login" (2, 166, 88, 30)',
            ],
            "click(61, 141)",
        ),
        (
            'Enter the username "vina" and the password "US" into the text fields and press login.',
            [
                'textbox "" (7, 78, 128, 22) value="vina"',
                'textbox "" (7, 130, 108, 22) value="**" password',
                'button "Login" (2, 166, 88, 30)',
            ],
            "click(46, 181)",
        ),
        (
            'Enter the username "vina" and the password "US" into the text fields and press login.',
            [
                'textbox "" (7, 78, 128, 22) value=""',
                'button "OK" (2, 160, 20, 20)',
                'button "Cancel" (40, 160, 40, 20)',
            ],
            "click(60, 170)",
        ),
        # click-dialog, click-dialog-2
        (
            'Close the dialog box by clicking the "x".',
            ['dialog "" (18, 76, 103, 104)', 'button "Close" (94, 80, 20, 20) focused'],
            "click(104, 90)",
        ),
        (
            'Click the button in the dialog box labeled "OK".',
            [
                'dialog "" (11, 57, 127, 124)',
                'button "Close" (111, 60, 20, 20)',
                'button "Cancel" (27, 147, 54, 22)',
                'button "OK" (85, 147, 36, 22)',
            ],
            "click(103, 158)",
        ),
        (
            'Click the button in the dialog box labeled "x".',
            [
                'dialog "" (11, 57, 127, 124)',
                'button "Close" (111, 60, 20, 20)',
                'button "OK" (85, 147, 36, 22)',
            ],
            "click(121, 70)",
        ),
        # multi-orderings / multi-layouts: fields named by the text before them
        (
            "Search for crime movies directed by Curry from year 1995.",
            [
                'text "Year" (9, 83, 40, 23)',
                'textbox "" (52, 84, 98, 22) value="1995"',
                'text "Genre" (9, 108, 40, 23)',
                'textbox "" (52, 109, 98, 22) value=""',
                'text "Director" (9, 133, 40, 23)',
                'textbox "" (52, 134, 98, 22) value=""',
                'text "Submit" (52, 163, 56, 18)',
            ],
            "click(101, 120)",
        ),
        (
            "Search for crime movies directed by Curry from year 1995.",
            [
                'text "Released Date" (12, 57, 136, 11)',
                'textbox "" (12, 68, 140, 22) value="1995"',
                'text "Director Name" (12, 97, 136, 11)',
                'textbox "" (12, 108, 140, 22) value="Curry"',
                'text "Movie Genre" (12, 137, 136, 11)',
                'textbox "" (12, 148, 140, 22) value="crime"',
                'button "Go!" (61, 174, 38, 22)',
            ],
            "click(80, 185)",
        ),
        # search-engine: search, then page 3 (results 7-9), then its first result
        (
            'Use the textbox to enter "Riley" and press "Search", then find and click the 7th search result.',
            ['textbox "" (4, 54, 88, 22) value="Riley" focused', 'button "Search" (95, 54, 58, 22)'],
            "click(124, 65)",
        ),
        (
            'Use the textbox to enter "Riley" and press "Search", then find and click the 7th search result.',
            [
                'textbox "" (4, 54, 88, 22) value="Riley"',
                'button "Search" (95, 54, 58, 22) focused',
                'link "Dolores" (4, 77, 38, 12)',
                'link "Cheree" (4, 110, 34, 12)',
                'link "Joye" (4, 143, 24, 12)',
                'link "1" (44, 191, 8, 18) selected',
                'link "2" (56, 191, 8, 18)',
                'link "3" (69, 191, 8, 18)',
                'link ">" (81, 191, 10, 18)',
            ],
            "click(73, 200)",
        ),
        (
            'Use the textbox to enter "Riley" and press "Search", then find and click the 7th search result.',
            [
                'textbox "" (4, 54, 88, 22) value="Riley"',
                'button "Search" (95, 54, 58, 22)',
                'link "Riley" (4, 77, 30, 12)',
                'link "Cheree" (4, 110, 34, 12)',
                'link "Joye" (4, 143, 24, 12)',
                'link "1" (44, 191, 8, 18)',
                'link "2" (56, 191, 8, 18)',
                'link "3" (69, 191, 8, 18) selected',
            ],
            "click(19, 83)",
        ),
        # drag-items: onto the item at the target position (a little past its middle)
        (
            "Drag Gerda to the 3rd position.",
            [
                'text "Willa" (27, 63, 112, 14)',
                'text "Gerda" (27, 91, 112, 14)',
                'text "Alvera" (27, 120, 112, 14)',
            ],
            "drag(83, 98, 83, 131)",
        ),
        (
            "Drag Alvera up by one position.",
            [
                'text "Willa" (27, 63, 112, 14)',
                'text "Gerda" (27, 91, 112, 14)',
                'text "Alvera" (27, 120, 112, 14)',
            ],
            "drag(83, 127, 83, 94)",
        ),
        # the page's terminal observation (only the window): an action that sends nothing
        ('Click on the "Ok" button.', [], "scroll(0, 0, 0)"),
    ],
)
def test_oracle_acts_on_real_utterance_templates(instruction: str, lines: list[str], action: str) -> None:
    assert _solve(instruction, *lines) == action


def test_synthetic_instructions_still_reach_the_synthetic_solvers() -> None:
    # the synthetic ClickCheckboxes quotes its labels: not the real template (which would read '"a"')
    lines = ['checkbox "a" (6, 55, 20, 14) unchecked', SUBMIT]
    assert _solve('Select "a" and click Submit.', *lines) == "click(16, 62)"
    field = 'textbox "" (5, 56, 128, 22) value="ab"'
    assert _solve('Enter "ab" in the text field and press Submit.', field, SUBMIT) == "click(50, 115)"


def test_real_task_utterance_templates_are_those_of_the_pages() -> None:
    """Each template the oracle parses is in its task's page (a miniwob that rewords one fails here)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("miniwob")
    if spec is None or spec.origin is None:
        pytest.skip("miniwob is not installed")
    html = Path(spec.origin).parent / "html" / "miniwob"
    fragments = {
        "click-button": "'Click on the \"' + correct_text + '\" button.'",
        "click-link": "'Click on the link \"' + correctText + '\".'",
        "click-checkboxes": "'Select ' + qstr + ' and click Submit.'",
        "click-option": "'Select ' + correctElement.query + ' and click Submit.'",
        "choose-list": "'Select ' + gt_txt + ' from the list and click Submit.'",
        "use-slider": "'Select ' + n + ' with the slider and hit Submit.'",
        "enter-password": "into both text fields and press submit.",
        "focus-text-2": "'Focus into the ' + POS[correctTextbox] + ' input textbox.'",
        "click-tab": "'Click on Tab #2.'",
        "click-dialog": 'Close the dialog box by clicking the "x".',
        "click-dialog-2": "'Click the button in the dialog box labeled \"' + expectedButton + '\".'",
        "multi-orderings": "movies directed by <b>' + eName + '</b> from year <b>'",
        "drag-items": "'Drag ' + ITEMS[ix-1] + ' ' + target_description",
    }
    for task, fragment in fragments.items():
        assert fragment in (html / f"{task}.html").read_text(), task
