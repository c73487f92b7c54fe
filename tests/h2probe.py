"""A raw HTTP/2 client that speaks just enough gRPC framing to behave like an attacker: it opens streams with the
headers it chooses, sends part of a message, and reports what the server did with each stream (how much it let the
client send, whether and how it ended the stream). grpcio's own client cannot send half a message, so this does.

Only what the probes need: HPACK literals without Huffman coding on the way out; on the way in, frames are read by
type and stream, never decoded (a stream's end is seen from its flags or a RST_STREAM).
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def _hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = bytearray([first | limit]), value - limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(headers: list[tuple[str, str]]) -> bytes:
    """Header block of literal fields without indexing (no dynamic table, no Huffman)."""
    out = bytearray()
    for name, value in headers:
        out += b"\x00" + _hpack_int(len(name), 7) + name.encode() + _hpack_int(len(value), 7) + value.encode()
    return bytes(out)


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


@dataclass
class StreamSeen:
    granted: int = 0  # stream-level WINDOW_UPDATE increments the server sent
    ended: str = ""  # "headers" (a trailers-only or trailers answer), "reset", or "" (still open)
    to_send: int = 0  # bytes of the declared message not sent yet (sent as the server grants window, if filling)
    credit: int = 0  # stream window the client may still use


@dataclass
class Probe:
    sock: socket.socket
    streams: dict[int, StreamSeen] = field(default_factory=dict)
    goaway: bool = False
    fill: bool = False  # send the rest of each declared message (but its last byte) as the server grants window
    connection_credit: int = 65535
    _buf: bytes = b""

    @classmethod
    def connect(cls, target: str, ca_path: str | None = None) -> "Probe":
        host, _, port = target.rpartition(":")
        raw = socket.create_connection((host, int(port)), timeout=10)
        if ca_path:
            ctx = ssl.create_default_context(cafile=ca_path)
            ctx.check_hostname = False
            ctx.set_alpn_protocols(["h2"])
            raw = ctx.wrap_socket(raw, server_hostname=host)
        probe = cls(raw)
        raw.sendall(PREFACE + frame(SETTINGS, 0, 0))
        return probe

    def open_stream(self, stream: int, authority: str, path: str, headers: list[tuple[str, str]] = (),
                    declared_bytes: int = 0, send_bytes: int = 0, scheme: str = "http") -> None:
        """HEADERS for a gRPC call, then one DATA frame: a message prefix declaring ``declared_bytes`` and the first
        ``send_bytes`` of it (never the end of the stream)."""
        block = hpack_literal([(":method", "POST"), (":scheme", scheme), (":path", path), (":authority", authority),
                               ("content-type", "application/grpc"), ("te", "trailers"), *headers])
        data = b"\x00" + struct.pack(">I", declared_bytes) + b"\x00" * send_bytes
        self.streams[stream] = StreamSeen(to_send=max(0, declared_bytes - 1 - send_bytes), credit=65535 - len(data))
        self.connection_credit -= len(data)
        self.sock.sendall(frame(HEADERS, END_HEADERS, stream, block))
        for start in range(0, len(data), 16384):
            self.sock.sendall(frame(DATA, 0, stream, data[start:start + 16384]))

    def _read_frame(self) -> tuple[int, int, int, bytes]:
        while len(self._buf) < 9:
            self._recv()
        length = int.from_bytes(self._buf[:3], "big")
        while len(self._buf) < 9 + length:
            self._recv()
        kind, flags = self._buf[3], self._buf[4]
        stream = int.from_bytes(self._buf[5:9], "big") & 0x7FFFFFFF
        payload, self._buf = self._buf[9:9 + length], self._buf[9 + length:]
        return kind, flags, stream, payload

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self._buf += chunk

    def watch(self, until, timeout_s: float) -> bool:
        """Read frames (acknowledging settings and pings) until ``until(self)`` is true; False at ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not until(self):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                kind, flags, stream, payload = self._read_frame()
            except (socket.timeout, TimeoutError):
                return False
            seen = self.streams.get(stream)
            if kind == SETTINGS and not flags & ACK:
                self.sock.sendall(frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                self.sock.sendall(frame(PING, ACK, 0, payload))
            elif kind == GOAWAY:
                self.goaway = True
            elif kind == WINDOW_UPDATE and stream == 0:
                self.connection_credit += int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                self._send_granted()
            elif seen is not None and kind == WINDOW_UPDATE:
                increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                seen.granted += increment
                seen.credit += increment
                self._send_granted()
            elif seen is not None and kind == RST_STREAM:
                seen.ended = seen.ended or "reset"
            elif seen is not None and kind == HEADERS and flags & END_STREAM:
                seen.ended = "headers"
        return True

    def _send_granted(self) -> None:
        """With ``fill``: as much of each open stream's message as both windows allow."""
        for stream, seen in self.streams.items():
            while self.fill and not seen.ended and seen.to_send:
                n = min(16384, seen.to_send, seen.credit, self.connection_credit)
                if n <= 0:
                    break
                self.sock.sendall(frame(DATA, 0, stream, b"\x00" * n))
                seen.to_send, seen.credit, self.connection_credit = seen.to_send - n, seen.credit - n, \
                    self.connection_credit - n

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
