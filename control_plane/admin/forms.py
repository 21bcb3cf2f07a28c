"""HTML forms over the API's validation schemas.

A form posts strings; `parse_form` turns them into the JSON-typed values the API
accepts (numbers, booleans, lists, objects) and then runs the API's own validator, so
the UI and the API enforce exactly the same rules and word errors the same way.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session
from werkzeug.datastructures import MultiDict

from control_plane.api.schemas import Schema, iso
from control_plane.api.validation import ValidationError, validate

# select: one of fixed strings; ref: the id of another row, chosen by its name;
# decimal: a number with a fraction; secret: write-only, never shown again;
# textarea: multi-line text (a PEM); secret_text: a write-only textarea (a key)
KINDS = ("text", "number", "decimal", "checkbox", "select", "ref", "names", "json",
         "datetime", "secret", "textarea", "secret_text")
SECRETS = ("secret", "secret_text")


@dataclass(frozen=True)
class Input:
    name: str
    label: str
    kind: str = "text"
    help: str = ""
    required: bool = False
    # select, ref: (value, label) pairs, read from the database when the form is shown
    choices: Callable[[Session], list[tuple[str, str]]] | None = None
    create_only: bool = False  # shown when creating, fixed afterwards
    default: str | bool = ""   # what a new form shows
    blank_is_null: bool = False  # an emptied field means null (e.g. "unlimited")
    blank_is_absent: bool = False  # an empty field leaves the stored value alone

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown input kind {self.kind!r}")


_ABSENT = object()  # leave the field out: the column default applies


def clear_name(inp: Input) -> str:
    """The checkbox that removes a stored secret."""
    return inp.name + "__clear"


def _convert(inp: Input, form: MultiDict) -> Any:
    """The JSON value for one input, or `_ABSENT`."""
    raw = form.get(inp.name, "")
    if inp.kind == "checkbox":
        return inp.name in form
    if inp.kind in SECRETS:
        if clear_name(inp) in form:
            return None
        if inp.kind == "secret_text":
            raw = raw.strip() + "\n" if raw.strip() else ""
        return raw if raw else _ABSENT  # empty: keep what is stored
    raw = raw.strip()
    if not raw and inp.blank_is_null:
        return None
    if not raw and inp.blank_is_absent:
        return _ABSENT
    if inp.kind == "textarea":
        return raw + "\n" if raw else _ABSENT
    if inp.kind in ("text", "select"):
        return raw if raw or not inp.required else _ABSENT
    if inp.kind in ("number", "ref"):
        if not raw:
            return _ABSENT
        if not re.fullmatch(r"-?\d{1,16}", raw):
            raise ValueError("must be a whole number")
        return int(raw)
    if inp.kind == "decimal":
        if not raw:
            return _ABSENT
        if not re.fullmatch(r"-?\d{1,16}(\.\d{1,9})?", raw):
            raise ValueError("must be a number such as 2 or 0.5")
        number = float(raw)
        return int(number) if number.is_integer() else number
    if inp.kind == "names":
        names = [n for n in re.split(r"[\s,]+", raw) if n]
        return names or None
    if inp.kind == "json":
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"must be valid JSON ({exc.msg} at character {exc.pos})") \
                from None
    if inp.kind == "datetime":
        return raw or None
    raise AssertionError(inp.kind)


def parse_form(form: MultiDict, inputs: list[Input], schema: Schema, *,
               creating: bool) -> dict[str, Any]:
    """Clean data for the service, or ValidationError with every field's problem."""
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for inp in inputs:
        if inp.create_only and not creating:
            continue
        try:
            value = _convert(inp, form)
        except ValueError as exc:
            errors[inp.name] = str(exc)
            continue
        if value is not _ABSENT:
            data[inp.name] = value
    try:
        clean = validate(data, schema.create if creating else schema.update,
                         partial=not creating, read_only=schema.read_only)
    except ValidationError as exc:
        errors = {**exc.fields, **errors}
        clean = {}
    if errors:
        raise ValidationError(errors)
    return clean


def form_values(obj: Any, inputs: list[Input]) -> dict[str, Any]:
    """What an edit form shows for an existing row, in the form's own notation."""
    values: dict[str, Any] = {}
    for inp in inputs:
        value = getattr(obj, inp.name, None)
        if inp.kind == "checkbox":
            values[inp.name] = bool(value)
        elif inp.kind in SECRETS or inp.blank_is_absent:
            values[inp.name] = ""  # write-only, or not a column (folded by to_row)
            values[clear_name(inp)] = value is not None  # whether one is stored
        elif inp.kind == "names":
            values[inp.name] = ", ".join(value) if value else ""
        elif inp.kind == "json":
            values[inp.name] = json.dumps(value or {}, indent=1, ensure_ascii=False)
        elif inp.kind == "datetime":
            values[inp.name] = iso(value) if isinstance(value, datetime) else ""
        else:
            values[inp.name] = "" if value is None else str(value)
    return values


def default_values(inputs: list[Input]) -> dict[str, Any]:
    return {inp.name: inp.default for inp in inputs}


def submitted_values(form: Mapping[str, str], inputs: list[Input]) -> dict[str, Any]:
    """The values a user typed, shown again next to the errors they caused."""
    values: dict[str, Any] = {}
    for inp in inputs:
        if inp.kind == "checkbox":
            values[inp.name] = inp.name in form
        elif inp.kind in SECRETS:
            values[inp.name] = ""  # not echoed, even when the form had errors
        else:
            values[inp.name] = form.get(inp.name, "")
    return values
