"""What KV blocks are called: the one place that names them, for prefill (which stores under the names), the router
(which predicts them to prefetch and to route by cache affinity), decode and the kvstore.

A full block's key chains the key before it with the model, the KV format and the block's token ids, so equal
prefixes have equal keys in every process; a salt (the router derives one per tenant) starts the chain, so equal
prefixes have equal keys only under the same salt. A partial last block is named by the request that wrote it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container

import numpy as np

from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE

DEFAULT_BLOCK_TOKENS = 16


def block_keys(token_ids: list[int], fingerprint: str, block_tokens: int = DEFAULT_BLOCK_TOKENS,
               kv_dtype: str = DEFAULT_KV_DTYPE, salt: str = "") -> list[str]:
    """Chained content keys of the *full* blocks of ``token_ids``.

    key_i = sha256(key_{i-1} | fingerprint | dtype | block size | token ids of block i), key_{-1} = ``salt``
    (sha256'd when set). Equal prefixes under equal salts give equal keys in any process, which is what makes prefix
    reuse across requests and services work; under different salts they share nothing.
    """
    keys: list[str] = []
    previous = hashlib.sha256(f"salt|{salt}".encode()).hexdigest() if salt else ""
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        block = token_ids[start:start + block_tokens]
        digest = hashlib.sha256()
        digest.update(f"{previous}|{fingerprint}|{kv_dtype}|{block_tokens}|".encode())
        digest.update(np.asarray(block, dtype="<u4").tobytes())
        previous = digest.hexdigest()
        keys.append(previous)
    return keys


def tail_block_key(scope: str, token_count: int) -> str:
    """Key of a partial last block: scoped to one prefill call (``scope``), never shared."""
    return f"tail:{scope}:{token_count}"


def handle_block_keys(full_block_keys: list[str], scope: str, token_count: int, block_tokens: int) -> list[str]:
    """The keys of a prompt's KV handle: its full blocks' keys, then its partial last block's (named by ``scope``,
    the prefill call's lease id) when ``token_count`` is not a whole number of blocks. Prefill stores under these
    keys, and the router predicts them to prefetch before prefill returns."""
    tail = [tail_block_key(scope, token_count)] if token_count % block_tokens else []
    return list(full_block_keys) + tail


def leading_hits(keys: list, present: Container) -> int:
    """How many of ``keys``, from the first, ``present`` holds: a prefix is reusable up to its first missing block."""
    for i, key in enumerate(keys):
        if key not in present:
            return i
    return len(keys)
