"""MiniWoB-style task families, each generated from the reset seed with a verifiable success check.

A family builds a :class:`~omnigym.envs.gui.screen.Screen` from a NumPy generator and judges it
after every step: success (True), failure (False) or still running (None). Each episode ends at
the first *commit* (the target button, or a form's submit button, is activated), as in MiniWoB.

This module is the registry, :data:`FAMILIES`; the base class is
:class:`~omnigym.envs.gui.task.Task`, the families live in :mod:`~omnigym.envs.gui.form_families`
(fill in a form, then submit) and :mod:`~omnigym.envs.gui.page_families` (dialogs, search
results, tabs, dragging, overlapping windows).
"""

from __future__ import annotations

from omnigym.envs.gui.form_families import (
    ClickButton,
    ClickCheckboxes,
    EnterText,
    FillForm,
    LoginUser,
    SelectOption,
    UseSlider,
)
from omnigym.envs.gui.page_families import CloseDialog, DragItem, MultiWindow, NavigateTabs, SearchAndClick
from omnigym.envs.gui.task import Task

FAMILIES: dict[str, type[Task]] = {
    task.name: task
    for task in (
        ClickButton,
        ClickCheckboxes,
        EnterText,
        LoginUser,
        SelectOption,
        UseSlider,
        CloseDialog,
        FillForm,
        SearchAndClick,
        NavigateTabs,
        DragItem,
        MultiWindow,
    )
}
"""Every family by name."""
