"""A receiver is its scheme, host and port however its URL writes them: one slow receiver holds one
of the notifier's POST slots, not one per spelling of its URL."""

from __future__ import annotations

from jobs.notifications.posts import receiver_of


def test_one_receiver_is_one_slot_however_its_url_is_written() -> None:
    # a slow receiver holds one POST slot: the same host and port written another way is the same receiver
    same = [
        "http://hooks.example/a",
        "http://hooks.example:80/b",
        "HTTP://Hooks.Example./c?x=1",
        "http://u:p@hooks.example/",
    ]
    assert {receiver_of(url) for url in same} == {"http://hooks.example:80"}
    assert receiver_of("https://hooks.example/") == receiver_of("https://hooks.example:443/") != receiver_of(same[0])
    assert receiver_of("http://[::1]/") == receiver_of("http://[::1]:80/") == "http://[::1]:80"
    assert receiver_of("http://hooks.example:8080/") != receiver_of(same[0])
