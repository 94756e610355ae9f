"""A userspace netem: delay and drop the IP packets routed through a TUN device.

    python bench/impair.py --device impair --delay-ms 50 --loss 0.01 [--seed 1]

This machine's kernel is built without the netem qdisc (CONFIG_NET_SCH_NETEM is off; tc knows
only htb, tbf and pfifo here), so `tc qdisc ... netem delay 50ms loss 1%` is not available.
bench.hosts.Topology.impaired() runs this in the switch namespace instead and routes the traffic
to impair into the TUN device: each packet read from it is dropped with probability `loss`, or
written back `delay` later, in order; written back, it arrives on the device and the kernel
forwards it to its destination (what comes in on the device is routed by the main table). TCP
sees what netem would give it: a longer round trip and lost segments to retransmit, with no
connection reset. Packets still held at SIGTERM are released at once.

Standard library only, run by path: it needs nothing of the project.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import select
import signal
import struct
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from types import FrameType

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000  # bare IP packets, no 4-byte packet-information header


@dataclass
class Counts:
    forwarded: int = 0
    dropped: int = 0


def open_tun(name: str) -> int:
    """A non-persistent TUN device named `name`: it exists while this fd is open."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def relay(fd: int, delay_s: float, loss: float, rng: random.Random, stopping: list[bool]) -> Counts:
    counts = Counts()
    held: deque[tuple[float, bytes]] = deque()  # one delay for all: arrival order is release order
    while not stopping:
        now = time.monotonic()
        while held and held[0][0] <= now:
            _write(fd, held.popleft()[1], counts)
        wait = min(0.2, held[0][0] - now) if held else 0.2
        readable, _, _ = select.select([fd], [], [], max(0.0, wait))
        while readable:
            try:
                packet = os.read(fd, 65535)
            except BlockingIOError:
                break
            if rng.random() < loss:
                counts.dropped += 1
            else:
                held.append((time.monotonic() + delay_s, packet))
    while held:
        _write(fd, held.popleft()[1], counts)
    return counts


def _write(fd: int, packet: bytes, counts: Counts) -> None:
    try:
        os.write(fd, packet)
        counts.forwarded += 1
    except OSError:  # the kernel refused it (no route any more): a loss like any other
        counts.dropped += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0, help="probability that a packet is dropped")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    fd = open_tun(args.device)
    stopping: list[bool] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.append(True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    counts = relay(fd, args.delay_ms / 1000, args.loss, random.Random(args.seed), stopping)
    print(json.dumps(asdict(counts)), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
