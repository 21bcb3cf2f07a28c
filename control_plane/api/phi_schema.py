"""What the admin API accepts as a model's or consumer's `phi_policy` (docs/phi.md):
{"<class>": "mask" | "block" | "log", "*": the rest}, the classes being those of
control_plane/services/phi_classes.py."""
from __future__ import annotations

from typing import Any

from control_plane.api.validation import Field, described
from control_plane.services.phi_classes import ACTIONS, DEFAULT, NAMES, check_policy

_SCHEMA = {"type": "object", "minProperties": 1,
           "propertyNames": {"enum": [*NAMES, DEFAULT]},
           "additionalProperties": {"type": "string", "enum": list(ACTIONS)}}

# the OpenAPI schema of GET /api/v1/phi-classes' items
CLASS_SHOWN = {"type": "object",
               "properties": {"name": {"type": "string"}, "placeholder": {"type": "string"},
                              "hipaa": {"type": ["string", "null"]},
                              "detector": {"type": "string"},
                              "approximate": {"type": "boolean"}, "how": {"type": "string"}}}


@described(_SCHEMA)
def phi_policy(value: Any) -> dict[str, str]:
    """{"<class>": "mask" | "block" | "log", "*": the rest}."""
    return check_policy(value)


FIELD = Field(phi_policy, nullable=True)
