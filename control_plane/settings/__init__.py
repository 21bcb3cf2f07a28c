"""Settings from the environment, parsed once into a frozen dataclass.

Each setting is declared once, as a field of `Settings`: its variable, its parser, its
default and what it means for people (`setting(...)`). The settings object, the
error messages and docs/configuration.md (control_plane/reference_docs.py) are all
derived from those fields. Variables that one process reads itself, outside Settings,
are described in OTHER_VARIABLES. The package: parsers.py (each variable's parser,
SettingsError), declared.py (the fields), here (reading them from the environment).

An optional `SLUICE_CONFIG` file of `KEY=VALUE` lines overlays the environment, so a
long-running process (the controller) can re-read it on SIGHUP without a restart.

The bottom floor: this package imports nothing else of the control plane.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from control_plane.settings import parsers
# re-exported: what the rest of the control plane reads of this package
from control_plane.settings.declared import (  # noqa: F401
    DESCRIPTIONS, OTHER_VARIABLES, VARIABLES, Settings, setting)
from control_plane.settings.parsers import (  # noqa: F401
    RedisURL, SettingsError, Source, parse_redis_url, parse_sources)


def read_config_file(path: str) -> dict[str, str]:
    """Parse `KEY=VALUE` lines; blank lines and `#` comments are skipped."""
    values: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise SettingsError(f"SLUICE_CONFIG: cannot read {path}: {exc.strerror}") from exc
    for lineno, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SettingsError(f"SLUICE_CONFIG: {path}:{lineno}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key] = value
    return values


def load_settings(environ: Mapping[str, str] = os.environ) -> Settings:
    """Build Settings from `environ`, overlaid by the file named in SLUICE_CONFIG."""
    merged = dict(environ)
    config_file = parsers.text(merged.get("SLUICE_CONFIG", ""))
    if config_file:
        merged.update(read_config_file(config_file))
    kwargs: dict[str, Any] = {"config_file": config_file}
    for name, f in VARIABLES.items():
        raw = merged.get(name)
        if raw is None:
            continue
        try:
            value = f.metadata["parse"](raw)
        except ValueError as exc:
            if f.metadata["secret"]:
                reason = str(exc) if isinstance(exc, parsers.Reason) else "is not valid"
                raise SettingsError(f"{name}=<redacted>: {reason}") from None
            # int()/float() messages are Python jargon; say what we expected instead
            reason = str(exc)
            if reason.startswith(("invalid literal", "could not convert")):
                reason = "expected a number"
            raise SettingsError(f"{name}={raw!r}: {reason}") from None
        if value is not None:
            kwargs[f.name] = value
    if bool(kwargs.get("tls_cert")) != bool(kwargs.get("tls_key")):
        raise SettingsError("SLUICE_TLS_CERT and SLUICE_TLS_KEY: set both (the certificate "
                            "chain and its key) or neither")
    if not kwargs.get("gateway_plain", True) and not kwargs.get("tls_cert"):
        raise SettingsError("SLUICE_GATEWAY_PLAIN=off needs SLUICE_TLS_CERT and "
                            "SLUICE_TLS_KEY: the gateway would have no public listener")
    return Settings(**kwargs)
