"""The typed confirmations' shared key handling (the teardown modal, the inbox's approval, the recovery approval):
a printable key goes into the field to type wherever the focus is. Focus starts on Cancel, so Enter alone never
confirms anything, and a person never has to click into the field first."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.screen import Screen
from textual.widgets import Input


def type_into(screen: Screen[Any], selector: str, event: events.Key, *, over_other_inputs: bool = True) -> None:
    """Send a printable `event` to the Input `selector` names, unless it is focused already; a key that arrives
    before the dialog is composed is left alone. `over_other_inputs=False` leaves a key typed into another Input
    there (the teardown modal's list of runs given up)."""
    field = next(screen.query(selector).results(Input), None)
    if field is None or not event.is_printable or not event.character or screen.focused is field:
        return
    if not over_other_inputs and isinstance(screen.focused, Input):
        return
    field.focus()
    field.insert_text_at_cursor(event.character)
    event.stop()
    event.prevent_default()
