"""Keyed MACs on KV blocks: a block the stack did not write cannot pass for one it did.

The CRC32 beside it catches corruption; anyone can recompute a CRC32, nobody without the stack's KV key can compute
this. Prefill signs each block it stores; the kvstore checks on Put (a forged block is never stored) and on every
Get (one altered in memory is dropped and reported, never served), and the reader checks again on arrival (a block
altered on its way, e.g. in a shared-memory file, is never used). The MAC covers the block's key and token count as
well as its bytes, so a genuine block cannot be replayed under another key.

The MAC is AES-256-GMAC (GCM authenticating only, NIST SP 800-38D; AES-NI makes it about ten times faster than
HMAC-SHA256 over a block), with the nonce rule GCM needs kept by construction: each writing process draws a random
128-bit writer id at start, uses the key HMAC-SHA256(stack MAC key, writer id) and numbers its MACs with a 96-bit
counter, so no nonce ever repeats under a key. A MAC is writer id | counter | tag (44 bytes); a reader derives the
writer's key from the id (kept for the most recent writers).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import secrets
from collections import OrderedDict

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from pdserve.kvstore.stored import MacMismatch, block_views

WRITER_BYTES, NONCE_BYTES, TAG_BYTES = 16, 12, 16
MAC_BYTES = WRITER_BYTES + NONCE_BYTES + TAG_BYTES
KEPT_WRITERS = 256


def derive(stack_key: bytes, purpose: bytes) -> bytes:
    """A key for one purpose, from the stack's KV key (so that the router's tenant salts and the blocks' MACs never
    share a key)."""
    return hmac.digest(stack_key, b"pdserve/" + purpose, "sha256")


class BlockMAC:
    """MACs of (key, token count, bytes) under keys derived from the stack's KV key."""

    def __init__(self, stack_key: bytes) -> None:
        self._root = derive(stack_key, b"block-mac")
        self._writer = secrets.token_bytes(WRITER_BYTES)
        self._counter = itertools.count(1)
        self._keys: OrderedDict[bytes, bytes] = OrderedDict()

    def _key(self, writer: bytes) -> bytes:
        key = self._keys.get(writer)
        if key is None:
            key = self._keys[writer] = hmac.digest(self._root, writer, hashlib.sha256)
            while len(self._keys) > KEPT_WRITERS:
                self._keys.popitem(last=False)
        return key

    @staticmethod
    def _authenticate(context, key: str, token_count: int, data) -> None:
        context.authenticate_additional_data(f"{key}\0{token_count}\0".encode())
        for view in block_views(data):
            context.authenticate_additional_data(view)

    def sign(self, key: str, token_count: int, data) -> bytes:
        nonce = next(self._counter).to_bytes(NONCE_BYTES, "big")
        encryptor = Cipher(algorithms.AES(self._key(self._writer)), modes.GCM(nonce)).encryptor()
        self._authenticate(encryptor, key, token_count, data)
        encryptor.finalize()
        return self._writer + nonce + encryptor.tag

    def verify(self, key: str, token_count: int, data, mac: bytes) -> None:
        if len(mac) != MAC_BYTES:
            raise MacMismatch(f"block {key}: no valid MAC (not written by this stack)")
        writer, nonce, tag = mac[:WRITER_BYTES], mac[WRITER_BYTES:-TAG_BYTES], mac[-TAG_BYTES:]
        decryptor = Cipher(algorithms.AES(self._key(writer)), modes.GCM(nonce, tag)).decryptor()
        self._authenticate(decryptor, key, token_count, data)
        try:
            decryptor.finalize()
        except InvalidTag:
            raise MacMismatch(f"block {key}: its MAC does not match (not written by this stack, or altered)") from None
