"""What /api/v1/routes accepts and shows. A route's versions come inline:

    {"name": "chat", "sticky": true, "versions": [
        {"model": "chat-canary", "conditions": {"user_type": "vip"}},
        {"model": "chat-stable", "percent": 90},
        {"model": "chat-canary", "percent": 10}]}

`conditions` is an object (each attribute equals the value; a list value: one of
them) or a list of {"attr", "op": "eq"|"ne"|"in", "value"}; it is stored and shown as
the list. A version with conditions takes `percent` (default 100) of the callers that
match; the versions without conditions split everyone else and must add up to 100
(checked by the service, with the models' existence).
"""
from __future__ import annotations

import re
from typing import Any

from control_plane.api import validation as v
from control_plane.api.schemas import Schema, iso
from control_plane.api.validation import NAME_SCHEMA, SCALAR_SCHEMA, Field, described
from control_plane.tables.config import Route

MAX_VERSIONS = 32
MAX_CONDITIONS = 16
MAX_IN_VALUES = 64
OPS = ("eq", "ne", "in")
_ATTR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")


def _scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) or (isinstance(value, str)
                                                      and len(value) <= 256)


def _condition(c: Any, where: str) -> dict[str, Any]:
    if not isinstance(c, dict) or set(c) - {"attr", "op", "value"}:
        raise ValueError(f"{where} must be an object with attr, op and value")
    attr, op, value = c.get("attr"), c.get("op", "eq"), c.get("value")
    if not isinstance(attr, str) or not _ATTR_RE.match(attr):
        raise ValueError(f"{where}.attr must be an attribute name (letters, digits, _ . : -)")
    if op not in OPS:
        raise ValueError(f"{where}.op must be one of: " + ", ".join(OPS))
    if op == "in":
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_IN_VALUES \
                or not all(_scalar(x) for x in value):
            raise ValueError(f"{where}.value must be a list of 1 to {MAX_IN_VALUES} strings, "
                             "numbers or booleans for op in")
    elif not _scalar(value):
        raise ValueError(f"{where}.value must be a string, number or boolean")
    return {"attr": attr, "op": op, "value": value}


def _conditions(value: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(value, dict):   # shorthand {"user_type": "vip", "tier": ["a", "b"]}
        value = [{"attr": k, "op": "in" if isinstance(x, list) else "eq", "value": x}
                 for k, x in value.items()]
    if not isinstance(value, list) or len(value) > MAX_CONDITIONS:
        raise ValueError(f"{where} must be an object or a list of at most "
                         f"{MAX_CONDITIONS} conditions")
    return [_condition(c, f"{where}[{i}]") for i, c in enumerate(value)]


_CONDITION = {"type": "object", "required": ["attr"], "additionalProperties": False,
              "properties": {"attr": {"type": "string", "pattern": _ATTR_RE.pattern},
                             "op": {"type": "string", "enum": list(OPS)},
                             "value": {"anyOf": [SCALAR_SCHEMA, {
                                 "type": "array", "minItems": 1, "maxItems": MAX_IN_VALUES,
                                 "items": SCALAR_SCHEMA}]}}}
_PERCENT = {"type": "integer", "minimum": 0, "maximum": 100}
_VERSIONS_IN = {"type": "array", "minItems": 1, "maxItems": MAX_VERSIONS, "items": {
    "type": "object", "required": ["model"], "additionalProperties": False,
    "properties": {"model": NAME_SCHEMA, "percent": _PERCENT, "conditions": {"anyOf": [
        {"type": "object", "maxProperties": MAX_CONDITIONS,
         "propertyNames": {"pattern": _ATTR_RE.pattern},
         "additionalProperties": _CONDITION["properties"]["value"]},
        {"type": "array", "maxItems": MAX_CONDITIONS, "items": _CONDITION}]}}}}
_VERSIONS_OUT = {"type": "array", "items": {
    "type": "object", "required": ["model", "model_id", "percent", "conditions"],
    "additionalProperties": False,
    "properties": {"model": NAME_SCHEMA, "model_id": {"type": "integer"},
                   "percent": _PERCENT,
                   "conditions": {"type": "array", "items": _CONDITION}}}}


@described(_VERSIONS_IN, _VERSIONS_OUT)
def route_versions(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_VERSIONS:
        raise ValueError(f"must be a list of 1 to {MAX_VERSIONS} versions")
    out = []
    for i, ver in enumerate(value):
        where = f"[{i}]"
        if not isinstance(ver, dict) or set(ver) - {"model", "percent", "conditions"}:
            raise ValueError(f"{where} must be an object with model, percent, conditions")
        try:
            model = v.name(ver.get("model"))
        except ValueError as exc:
            raise ValueError(f"{where}.model {exc}") from None
        conditions = _conditions(ver.get("conditions") or [], f"{where}.conditions")
        percent = ver.get("percent", 100 if conditions else None)
        if isinstance(percent, bool) or not isinstance(percent, int) \
                or not 0 <= percent <= 100:
            raise ValueError(f"{where}.percent must be an integer between 0 and 100")
        out.append({"model": model, "percent": percent, "conditions": conditions})
    return out


class RouteSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "sticky": Field(v.boolean),
        "enabled": Field(v.boolean),
        "versions": Field(route_versions, required=True),
    }
    update = {k: Field(f.parse) for k, f in create.items()}

    def render(self, r: Route) -> dict[str, Any]:
        return {"id": r.id, "name": r.name, "sticky": r.sticky, "enabled": r.enabled,
                "versions": [{"model": ver.model.name, "model_id": ver.model_id,
                              "percent": ver.percent, "conditions": ver.conditions}
                             for ver in r.versions],
                "created_at": iso(r.created_at), "updated_at": iso(r.updated_at)}
