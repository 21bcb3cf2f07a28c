"""Hosted vendors as presets: what a backend of each vendor needs, as data.

An operator creates a backend with `"preset": "<name>"` and the few values that
preset names (its key, an Azure deployment, a base URL of their own); the preset
fills the rest: protocol, URL, the header the key goes in and how it is written,
other headers, the path map and the query string. A field the operator sets
explicitly wins over the preset's. docs/presets.md lists them.

Each preset's URL is `base_url` + `path`, both patterns: `{name}` is replaced by the
value of that name the operator gave (a preset value, or the preset's default).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from control_plane.services.errors import Invalid
from control_plane.tables.config import PROTOCOLS

# Azure OpenAI's data-plane version (GA), sent as ?api-version=.
AZURE_API_VERSION = "2024-10-21"
# The Messages API version every Anthropic request names.
ANTHROPIC_VERSION = "2023-06-01"
# What a preset may ask of the operator, besides the key. Each is a plain value that
# goes into a URL pattern, so it is one URL path segment (or, base_url, a whole URL).
PRESET_VALUES = ("api_key", "base_url", "resource", "deployment", "upstream_model",
                 "api_version")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_SEGMENT = re.compile(r"^[A-Za-z0-9._~-]{1,256}$")


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    protocol: str
    base_url: str                     # pattern; "" when the operator must give one
    path: str = ""                    # pattern appended to base_url
    auth_header_name: str | None = None   # None: Authorization
    auth_format: str = "Bearer {api_key}"
    key_required: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    query: str = ""                   # pattern
    defaults: dict[str, str] = field(default_factory=dict)
    docs: str = ""                    # the vendor's API reference
    # a hosted vendor has no readiness endpoint of a model server's: the controller's
    # health checks leave its backends alone (controller/health_loop.py)
    probed: bool = False

    @property
    def available(self) -> bool:
        """Does this version speak the preset's protocol? (`anthropic` comes with the
        Anthropic backend protocol.)"""
        return self.protocol in PROTOCOLS

    def needs(self) -> list[str]:
        """The values an operator must give (those without a default)."""
        names = _PLACEHOLDER.findall(self.base_url + self.path + self.query)
        if self.key_required:
            names.insert(0, "api_key")
        if not self.base_url:
            names.insert(0, "base_url")
        return [n for n in dict.fromkeys(names) if n not in self.defaults]

    def describe(self) -> dict[str, Any]:
        """The preset as GET /api/v1/backend-presets lists it."""
        return {"name": self.name, "title": self.title, "protocol": self.protocol,
                "available": self.available,
                "url": self.base_url + self.path or None,
                "auth_header_name": self.auth_header_name or "Authorization",
                "auth_format": self.auth_format, "key_required": self.key_required,
                "headers": dict(self.headers), "paths": dict(self.paths),
                "query": self.query or None, "defaults": dict(self.defaults),
                "needs": self.needs(), "probed": self.probed, "docs": self.docs}


# The OpenAI chat paths an Azure deployment serves under its own path.
_AZURE_PATHS = {"/v1/chat/completions": "/chat/completions",
                "/v1/completions": "/completions", "/v1/embeddings": "/embeddings"}


def _compatible(name: str, title: str, base_url: str, docs: str,
                key_required: bool = True) -> Preset:
    """An OpenAI-compatible vendor: the `openai` protocol under its own base URL."""
    return Preset(name, title, "openai", base_url, key_required=key_required, docs=docs,
                  probed=not key_required)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("openai", "OpenAI", "openai", "https://api.openai.com",
           docs="https://platform.openai.com/docs/api-reference"),
    Preset("azure_openai", "Azure OpenAI", "openai", "https://{resource}.openai.azure.com",
           path="/openai/deployments/{deployment}", auth_header_name="api-key",
           auth_format="{api_key}", paths=_AZURE_PATHS, query="api-version={api_version}",
           defaults={"api_version": AZURE_API_VERSION},
           docs="https://learn.microsoft.com/azure/ai-services/openai/reference"),
    Preset("anthropic", "Anthropic", "anthropic", "https://api.anthropic.com",
           auth_header_name="x-api-key", auth_format="{api_key}",
           headers={"anthropic-version": ANTHROPIC_VERSION},
           docs="https://docs.anthropic.com/en/api/messages"),
    Preset("gemini", "Google Gemini", "gemini", "https://generativelanguage.googleapis.com",
           path="/v1beta/models/{upstream_model}", auth_header_name="x-goog-api-key",
           auth_format="{api_key}",
           docs="https://ai.google.dev/api/generate-content"),
    _compatible("deepseek", "DeepSeek", "https://api.deepseek.com",
                "https://api-docs.deepseek.com/api/create-chat-completion"),
    _compatible("dashscope", "Qwen (Alibaba Cloud DashScope, compatible mode)",
                "https://dashscope.aliyuncs.com/compatible-mode",
                "https://help.aliyun.com/zh/model-studio/compatibility-of-openai-with-dashscope"),
    _compatible("mistral", "Mistral AI", "https://api.mistral.ai",
                "https://docs.mistral.ai/api/"),
    _compatible("vllm", "vLLM (OpenAI-compatible server)", "",
                "https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html",
                key_required=False),
    _compatible("sglang", "SGLang (OpenAI-compatible server)", "",
                "https://docs.sglang.ai/basic_usage/openai_api.html", key_required=False),
)}
NAMES = tuple(PRESETS)


def probed(name: str | None) -> bool:
    """Do the controller's health checks probe a backend made from preset `name`?
    (A backend of no preset: as its protocol says.)"""
    return name not in PRESETS or PRESETS[name].probed


def listing() -> list[dict[str, Any]]:
    return [p.describe() for p in PRESETS.values()]


def _fill(pattern: str, values: Mapping[str, str], what: str) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            raise Invalid({name: f"is required by the preset (for its {what})"})
        return values[name]
    return _PLACEHOLDER.sub(one, pattern)


def _values(preset: Preset, given: Mapping[str, Any]) -> dict[str, str]:
    values = {**preset.defaults}
    for name in PRESET_VALUES:
        value = given.get(name)
        if value is None:
            continue
        if name not in ("api_key", "base_url") and not _SEGMENT.match(value):
            raise Invalid({name: "must be 1-256 letters, digits and . _ ~ -"})
        values[name] = value
    return values


def apply(data: Mapping[str, Any]) -> dict[str, Any]:
    """Backend fields with the preset's filled in: `data` holds the validated input,
    `preset` and its values (PRESET_VALUES) among it; those values are consumed, the
    backend's own fields given in `data` win. Without `preset`, `data` less the preset
    values (a value without a preset is refused)."""
    out = {k: v for k, v in data.items() if k not in PRESET_VALUES}
    name = data.get("preset")
    if name is None:
        stray = [k for k in PRESET_VALUES if data.get(k) is not None]
        if stray:
            raise Invalid({stray[0]: "needs a preset"})
        return out
    preset = PRESETS[name]
    if not preset.available:
        raise Invalid({"preset": f"needs the {preset.protocol!r} backend protocol, "
                                 "which this version of Sluice does not speak"})
    values = _values(preset, data)
    filled: dict[str, Any] = {"protocol": preset.protocol,
                              "auth_header_name": preset.auth_header_name,
                              "headers": dict(preset.headers) or None,
                              "paths": dict(preset.paths) or None}
    if "url" not in data:
        base = values.get("base_url", preset.base_url)
        if not base:
            raise Invalid({"base_url": "is required by the preset (its server's URL)"})
        filled["url"] = _fill(base, values, "URL").rstrip("/") + _fill(preset.path, values,
                                                                        "URL")
    filled["query"] = _fill(preset.query, values, "query string") if preset.query else None
    if "auth_header" not in data:
        if "api_key" in values:
            filled["auth_header"] = preset.auth_format.format(api_key=values["api_key"])
        elif preset.key_required:
            raise Invalid({"api_key": "is required by the preset"})
        else:   # none: no other vendor's key stays behind (a PATCH to this preset)
            filled["auth_header"] = None
    return {**filled, **out}
