"""Which addresses a webhook may reach: the notifier's guard against SSRF.

A submitter names the URL, and the notifier runs inside the cluster: without a guard, `--notify
http://10.0.0.5:8080/admin` or the cloud metadata address would make the notifier call services
only the cluster can reach. So every address a webhook's host resolves to is judged before the
POST, and the POST connects to an address that passed (never resolving again, so a DNS answer
that changes between the check and the connection changes nothing). Refused unless the operator
allows them: loopback, private (RFC 1918, fc00::/7), link-local (169.254/16 with the metadata
address, fe80::/10), unspecified, multicast, reserved and documentation ranges, shared address
space (100.64/10), and IPv6 forms that carry such an IPv4 address (mapped, 6to4, NAT64).
Pure: judged and tested without a network.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_HINT = "the notifier's operator can allow it with --allow-private-targets or --allow-target CIDR"

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the IPv4 address is the last 32 bits


def parse_network(text: str) -> Network:
    """An --allow-target value: a CIDR network, or one address (a /32 or /128)."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not an address or a CIDR network (such as 10.0.0.0/8 or fd00::/8)") from None


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped ::ffff:a.b.c.d, 6to4, NAT64), or None."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def restricted_kind(address: Address) -> str | None:
    """What makes `address` one a webhook must not reach by default ('private', 'loopback', ...),
    or None for a public address."""
    inner = embedded_ipv4(address)
    if inner is not None:
        return restricted_kind(inner)
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"  # 169.254.169.254, the cloud metadata service, is one
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.IPv4Network("100.64.0.0/10"):
        return "shared (carrier-grade NAT)"
    if address.is_reserved:
        return "reserved"
    if address.is_private or not address.is_global:
        return "private"
    return None


@dataclass(frozen=True)
class TargetSettings:
    """Which addresses the notifier may POST to: public ones always; the others only if the
    operator allows them all (allow_private) or their network (allowed)."""

    allow_private: bool = False
    allowed: tuple[Network, ...] = ()

    @classmethod
    def of(cls, allow_private: bool, networks: Iterable[str] = ()) -> TargetSettings:
        """From the notifier's options; ValueError names a value that is not a network."""
        return cls(allow_private, tuple(parse_network(n) for n in networks))

    def explicitly_allowed(self, address: Address) -> bool:
        """Whether the operator allowed this address by name: its receivers are the operator's own,
        so what they answer may be shown to submitters."""
        if self.allow_private and restricted_kind(address) is not None:
            return True
        candidates = [address, *([inner] if (inner := embedded_ipv4(address)) is not None else [])]
        return any(a.version == n.version and a in n for a in candidates for n in self.allowed)

    def refusal(self, address: Address) -> str | None:
        """Why a POST to `address` is refused, or None when it may go."""
        kind = restricted_kind(address)
        if kind is None or self.explicitly_allowed(address):
            return None
        article = "an" if kind[0] in "aeiou" else "a"
        return f"{article} {kind} address ({address})"


def ip_of(text: str) -> Address:
    """An address as getaddrinfo gives it (an IPv6 one may carry a %scope)."""
    return ipaddress.ip_address(text.split("%", 1)[0])
