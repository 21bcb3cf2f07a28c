"""One setting's declaration: a dataclass field that carries its variable, parser,
default and meaning (control_plane.settings.declared and .jobs declare with it)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


def setting(variable: str, parse: Callable[[str], Any], default: Any, meaning: str, *,
            default_words: str | None = None, secret: bool = False) -> Any:
    """A field of `Settings` read from `variable` by `parse`, `default` when unset.

    `meaning` and `default_words` (where the default alone would mislead) are the
    reference docs' words; a `secret` value is never quoted in an error.
    """
    return dataclasses.field(default=default, metadata={
        "variable": variable, "parse": parse, "meaning": meaning,
        "default_words": default_words, "secret": secret})
