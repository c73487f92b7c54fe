"""Error texts fit for callers outside the stack: they name the role that failed, never where it runs.

An upstream failure that is about the request (a bad field, a full queue, a duplicate id) keeps its text, with any
address taken out; one that is about the plumbing (unavailable, internal, deadline, data loss) says only which role
failed and how, since gRPC's own texts for those carry addresses ("ipv4:10.1.2.3:50061: connection refused").
"""

from __future__ import annotations

import re

import grpc

# host:port (names, IPv4, [IPv6] also URL-encoded as gRPC prints it), with an ipv4:/ipv6:/dns: scheme or none;
# unix: paths; bare IPv4 addresses
_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|%5B[0-9A-Fa-f:.]+%5D|[\w.-]+)"
ADDRESS = re.compile(rf"(?:(?:ipv4|ipv6|dns):)?{_HOST}:\d{{1,5}}\b|unix(?:-abstract)?:[^\s,;]+"
                     rf"|\b\d{{1,3}}(?:\.\d{{1,3}}){{3}}\b")
ABOUT_THE_REQUEST = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.FAILED_PRECONDITION,
                     grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.NOT_FOUND,
                     grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


def without_addresses(text: str) -> str:
    return ADDRESS.sub("<address>", text)


def public_message(role: str, code: grpc.StatusCode, details: str | None) -> str:
    """What a caller is told of a ``role`` call that failed with ``code``."""
    if code in ABOUT_THE_REQUEST and details:
        return f"{role}: {without_addresses(details)}"
    return f"{role}: {code.name.lower()}"
