"""The gateway's listener-wide per-IP limit, declared once (see
control_plane.settings.declared: `Settings` takes these fields from `IpLimitSettings`),
pushed in the snapshot's "ip_limit" section (docs/contracts.md, lua/sluice/ip_limit.lua)."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from control_plane.settings import parsers
from control_plane.settings.setting import setting


def cidr_list(value: str) -> tuple[str, ...]:
    """Comma-separated networks (`10.0.0.0/8`, `2001:db8::/32`, a bare address)."""
    nets = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            nets.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP network (CIDR)") from None
    return tuple(nets)


def ipv6_prefix(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 128:
        raise ValueError("must be a prefix length from 1 to 128")
    return number


@dataclass(frozen=True)
class IpLimitSettings:
    # A token bucket per caller address, taken before the key lookup (bad keys and
    # unauthenticated requests count too); X-Forwarded-For believed only from trusted
    # proxies; an IPv6 caller counted by its prefix.
    ip_rate: float | None = setting(
        "SLUICE_IP_RATE", parsers.positive_float, None,
        "requests per second one client address may make (a token bucket, "
        "taken before the key lookup; over it: 429 `rate_limited`)",
        default_words="none (no per-IP limit)")
    ip_burst: int = setting(
        "SLUICE_IP_BURST", parsers.count, 20,
        "the per-IP bucket's size: requests one address may make at once")
    trusted_proxies: tuple[str, ...] = setting(
        "SLUICE_TRUSTED_PROXIES", cidr_list, (),
        "comma-separated CIDRs of proxies whose `X-Forwarded-For` names "
        "the client for the per-IP limit (from any other peer it is ignored)",
        default_words="none")
    ip_v6_prefix: int = setting(
        "SLUICE_IP_V6_PREFIX", ipv6_prefix, 64,
        "an IPv6 client counts by this prefix of its address for the per-IP limit")

    def ip_limit(self) -> dict[str, Any]:
        """The snapshot's "ip_limit" section (docs/contracts.md)."""
        return {"rate": self.ip_rate, "burst": self.ip_burst,
                "trusted_proxies": list(self.trusted_proxies),
                "ipv6_prefix": self.ip_v6_prefix}
