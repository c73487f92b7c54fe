"""Options of the router's public gRPC port, sized to what a legitimate request can need.

Every byte a caller sends before the router can judge it is memory the caller controls. The bearer token is checked
from the call's headers before gRPC reads the message (``router/auth.py``); what an authenticated caller may send is
bounded here: one message no larger than the biggest prompt the router would accept, a ceiling on calls in flight
over all connections, connections that end when idle or old, and no compressed requests (a small compressed message
could inflate to the whole limit; clients of the public API have no need to compress prompts).
"""

from __future__ import annotations

from dataclasses import dataclass

# The rest of a GenerateRequest beside its prompt (sampling, stop strings, logit bias, response format): generous.
OTHER_FIELDS_BYTES = 1 << 20
UTF8_MAX_BYTES_PER_CHAR = 4
VARINT_MAX_BYTES_PER_ID = 5
IDENTITY_ONLY = 1  # grpc.compression_enabled_algorithms_bitset: bit 0 is "identity" (no compression)


def max_request_bytes(max_prompt_chars: int, context_length: int) -> int:
    """The largest request message a valid call can carry: a prompt at the character limit in the widest UTF-8, or a
    context's worth of token ids as varints, plus the other fields."""
    return max(max_prompt_chars * UTF8_MAX_BYTES_PER_CHAR, context_length * VARINT_MAX_BYTES_PER_ID) + \
        OTHER_FIELDS_BYTES


@dataclass(frozen=True)
class PublicPortLimits:
    max_request_bytes: int
    max_streams_per_connection: int = 100
    idle_s: float = 300.0
    max_age_s: float = 3600.0
    age_grace_s: float = 600.0

    def options(self) -> list[tuple[str, object]]:
        """grpc server options (channel arguments) of the public port."""
        return [
            ("grpc.max_receive_message_length", self.max_request_bytes),
            ("grpc.max_concurrent_streams", self.max_streams_per_connection),
            ("grpc.max_connection_idle_ms", int(self.idle_s * 1000)),
            ("grpc.max_connection_age_ms", int(self.max_age_s * 1000)),
            ("grpc.max_connection_age_grace_ms", int(self.age_grace_s * 1000)),
            ("grpc.compression_enabled_algorithms_bitset", IDENTITY_ONLY),
        ]
