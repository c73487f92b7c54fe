"""Keyed MACs on KV blocks: a block the stack did not write cannot pass for one it did.

The CRC32 beside it catches corruption; anyone can recompute a CRC32, nobody without the stack's KV key can compute
this. Prefill signs each block it stores; the kvstore checks on Put (a forged block is never stored) and on every
Get (one altered in memory or in a shared-memory file is dropped and reported, never served), and the reader checks
again on arrival. The MAC covers the block's key and token count as well as its bytes, so a genuine block cannot be
replayed under another key.
"""

from __future__ import annotations

import hashlib
import hmac

from pdserve.kvstore.store import MacMismatch, block_views


def derive(stack_key: bytes, purpose: bytes) -> bytes:
    """A key for one purpose, from the stack's KV key (so that the router's tenant salts and the blocks' MACs never
    share a key)."""
    return hmac.digest(stack_key, b"pdserve/" + purpose, "sha256")


class BlockMAC:
    """HMAC-SHA256 of (key, token count, bytes) under a key derived from the stack's KV key."""

    def __init__(self, stack_key: bytes) -> None:
        self._key = derive(stack_key, b"block-mac")

    def sign(self, key: str, token_count: int, data) -> bytes:
        mac = hmac.new(self._key, f"{key}\0{token_count}\0".encode(), hashlib.sha256)
        for view in block_views(data):
            mac.update(view)
        return mac.digest()

    def verify(self, key: str, token_count: int, data, mac: bytes) -> None:
        if not hmac.compare_digest(self.sign(key, token_count, data), mac):
            raise MacMismatch(f"block {key}: its MAC does not match (not written by this stack, or altered)")
