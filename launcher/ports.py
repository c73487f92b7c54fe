"""Ports for the processes a stack starts: free ones drawn where no outgoing connection takes them, and the fixed
metrics ports (``--metrics-base-port``) by kind of process."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_handed_out: set[int] = set()


def _ports_below_ephemeral() -> range:
    """Ports under the kernel's ephemeral range, where no outgoing connection takes its local port."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10000, max(low, 11000))


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a process about to start.

    Binding port 0 would hand out an ephemeral port: in the seconds until the service binds it, a client's outgoing
    connection (or the next port-0 bind) can take the same port. Ports are therefore drawn from below the ephemeral
    range, starting at a random point, and never handed out twice by one process.
    """
    ports = _ports_below_ephemeral()
    start = random.randrange(len(ports))
    for step in range(len(ports)):
        port = ports[(start + step) % len(ports)]
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port on {host} in {ports.start}..{ports.stop - 1}")


# Fixed metrics ports: base + offset + index. (first offset, how many processes of that kind fit)
METRICS_OFFSETS = {"router": (0, 1), "openai_server": (1, 1), "kvstore": (10, 10), "prefill_server": (20, 30),
                   "decode_server": (50, 50)}
DEFAULT_METRICS_BASE_PORT = 9400


def metrics_port_for(base: int, module: str, index: int) -> int:
    """The fixed metrics port of the index-th process of a kind; ValueError if the kind has no room for it."""
    offset, room = METRICS_OFFSETS[module]
    if index >= room:
        raise ValueError(f"metrics_base_port: fixed metrics ports fit {room} {module} processes, got {index + 1}")
    port = base + offset + index
    if not 0 < port < 65536:
        raise ValueError(f"metrics_base_port: {base} puts the {module} metrics port at {port}, outside 1..65535")
    return port
