"""Which addresses a webhook may reach by default, and what the operator's allowances change."""

from __future__ import annotations

import ipaddress

import pytest

from jobs.notifications.targets import TargetSettings, parse_network, restricted_kind


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),  # the broadcast address
        ("100.64.0.1", "shared (carrier-grade NAT)"),
        ("100.127.255.254", "shared (carrier-grade NAT)"),
        ("192.0.2.10", "private"),  # documentation
        ("::ffff:10.0.0.5", "private"),  # IPv4-mapped
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:a00:5::1", "private"),  # 6to4 of 10.0.0.5
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("8.8.8.8", None),
        ("93.184.215.14", None),
        ("100.128.0.1", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::808:808", None),
    ],
)
def test_each_non_public_address_is_named_for_what_it_is(address: str, kind: str | None) -> None:
    assert restricted_kind(ipaddress.ip_address(address)) == kind


def test_the_operator_allows_all_private_addresses_or_named_networks() -> None:
    ip = ipaddress.ip_address
    default = TargetSettings()
    assert default.refusal(ip("10.0.0.5")) == "a private address (10.0.0.5)"
    assert default.refusal(ip("8.8.8.8")) is None
    assert default.refusal(ip("0.0.0.0")) == "an unspecified address (0.0.0.0)"
    everything = TargetSettings(allow_private=True)
    assert everything.refusal(ip("169.254.169.254")) is None
    assert everything.explicitly_allowed(ip("10.0.0.5")) and not everything.explicitly_allowed(ip("8.8.8.8"))
    some = TargetSettings.of(False, ["10.1.0.0/16", "fd00::/8", "8.8.8.8"])
    assert some.refusal(ip("10.1.2.3")) is None
    assert some.refusal(ip("::ffff:10.1.2.3")) is None  # the same address, mapped
    assert some.refusal(ip("10.2.0.1")) == "a private address (10.2.0.1)"
    assert some.refusal(ip("fd00::5")) is None
    assert some.refusal(ip("169.254.169.254")) == "a link-local address (169.254.169.254)"
    assert some.explicitly_allowed(ip("8.8.8.8")) and not some.explicitly_allowed(ip("8.8.4.4"))


def test_an_allowance_that_is_not_a_network_says_what_is_expected() -> None:
    assert str(parse_network("10.0.0.0/8")) == "10.0.0.0/8"
    assert str(parse_network("10.0.0.7/8")) == "10.0.0.0/8"
    with pytest.raises(ValueError, match=r"'10.0.0.0/33' is not an address or a CIDR network \(such as 10.0.0.0/8"):
        parse_network("10.0.0.0/33")
    with pytest.raises(ValueError, match="'intranet' is not an address"):
        TargetSettings.of(False, ["intranet"])
