"""The KV hand-off contract: what the router, prefill, the kvstore and decode agree on about a request's KV.

The router makes a request's lease (:func:`new_lease_id`, one more per extra sample: :func:`sample_lease_id`),
prefill stores the prompt's blocks under it and describes them in a ``KVHandle`` (:func:`build_handle`), and decode
fetches them with it. Every service checks what it receives against the same rules, here: the lease id
(:func:`check_lease_id`), the lease TTL (:func:`check_lease_ttl`), how long a Get may wait for blocks still being
written (:func:`check_wait_s`) and the handle as a whole (:func:`check_handle`). The kvstore's implementation
(``kvstore/store.py``) is its own; the other services import this module, not the store.

Each check raises :class:`~pdserve.engine.params.InvalidParameter` naming the field, for the caller to answer
INVALID_ARGUMENT with.
"""

from __future__ import annotations

import math
import uuid

import grpc

from pdserve.engine.kv.blocks import handle_block_keys
from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE
from pdserve.engine.params import InvalidParameter
from pdserve.v1 import common_pb2

MAX_LEASE_ID_CHARS = 128  # a lease id: printable ASCII (it is logged, and named in status texts)
DEFAULT_LEASE_TTL_S = 30.0  # how long prefilled KV waits, leased, for a decode worker
MAX_LEASE_TTL_S = 300.0  # the longest a lease lasts without a renewal
MAX_WAIT_S = 600.0  # the longest a Get waits for blocks still being written
UNKNOWN_LEASE = "lease_id: no lease"  # how the kvstore's answer for a lease it does not know starts


def new_lease_id() -> str:
    """A request's lease id: a random 128-bit capability (it travels only between the internal services)."""
    return uuid.uuid4().hex


def sample_lease_id(lease_id: str, sample: int) -> str:
    """The id of the copy of a request's lease that sample ``sample`` (n > 1) decodes under."""
    return f"{lease_id}#{sample}"


def check_lease_id(lease_id: str, field: str = "lease_id") -> str:
    """1..MAX_LEASE_ID_CHARS printable ASCII characters: what the router makes, and nothing a log line could not
    hold."""
    if not lease_id or len(lease_id) > MAX_LEASE_ID_CHARS or not (lease_id.isascii() and lease_id.isprintable()):
        raise InvalidParameter(field, f"must be 1..{MAX_LEASE_ID_CHARS} printable ASCII characters: a lease the "
                                      f"router made for the request")
    return lease_id


def check_lease_ttl(ttl_s: float, field: str = "lease_ttl_s") -> float:
    """In (0, MAX_LEASE_TTL_S] seconds."""
    if not math.isfinite(ttl_s) or not 0 < ttl_s <= MAX_LEASE_TTL_S:
        raise InvalidParameter(field, f"must be in (0, {MAX_LEASE_TTL_S:g}], got {ttl_s}")
    return ttl_s


def check_wait_s(wait_s: float, field: str = "wait_s") -> float:
    """In [0, MAX_WAIT_S] seconds (0: the blocks must be stored already)."""
    if not math.isfinite(wait_s) or not 0 <= wait_s <= MAX_WAIT_S:
        raise InvalidParameter(field, f"must be in [0, {MAX_WAIT_S:g}], got {wait_s}")
    return wait_s


def wait_s_within(remaining_s: float | None) -> float:
    """How long a Get may wait for blocks when the request has ``remaining_s`` left (None: no deadline)."""
    return min(MAX_WAIT_S, remaining_s if remaining_s is not None else MAX_WAIT_S)


def lease_unknown(err: object) -> bool:
    """A kvstore's answer (passed on unchanged by a worker, with its role in front) that it does not know the lease:
    never made there, expired, or the kvstore restarted since."""
    return (isinstance(err, grpc.aio.AioRpcError) and err.code() == grpc.StatusCode.FAILED_PRECONDITION
            and UNKNOWN_LEASE in (err.details() or ""))


def handle_keys(full_block_keys: list[str], lease_id: str, token_count: int, block_tokens: int) -> list[str]:
    """The keys a handle names for a prompt of ``token_count`` tokens: its full blocks' content keys, and the partial
    tail's, which is scoped to the request's lease."""
    return handle_block_keys(full_block_keys, lease_id, token_count, block_tokens)


def build_handle(block_keys: list[str], token_count: int, block_tokens: int, lease_id: str, lease_ttl_s: float,
                 model_fingerprint: str, kv_dtype: str, wait_s: float = 0.0) -> common_pb2.KVHandle:
    """The handle of a prompt's stored (or, with ``wait_s``, being stored) blocks."""
    return common_pb2.KVHandle(block_keys=block_keys, token_count=token_count, block_tokens=block_tokens,
                               lease_id=lease_id, lease_ttl_s=lease_ttl_s, model_fingerprint=model_fingerprint,
                               kv_dtype=kv_dtype, wait_s=wait_s)


def under_lease(handle: common_pb2.KVHandle, lease_id: str) -> common_pb2.KVHandle:
    """A copy of ``handle`` naming another lease on the same blocks (a sample's copy of the request's lease)."""
    copy = common_pb2.KVHandle()
    copy.CopyFrom(handle)
    copy.lease_id = lease_id
    return copy


def from_block(handle: common_pb2.KVHandle, first: int) -> common_pb2.KVHandle:
    """A copy of ``handle`` naming its blocks from ``first`` on (the rest of an import that stopped part way)."""
    rest = common_pb2.KVHandle()
    rest.CopyFrom(handle)
    del rest.block_keys[:]
    rest.block_keys.extend(handle.block_keys[first:])
    return rest


def same_blocks(a: common_pb2.KVHandle, b: common_pb2.KVHandle) -> bool:
    """Whether two handles name the same blocks under the same lease (a prefetched copy is the Decode call's)."""
    return (list(a.block_keys) == list(b.block_keys) and a.lease_id == b.lease_id and a.token_count == b.token_count
            and a.model_fingerprint == b.model_fingerprint)


def check_handle(handle: common_pb2.KVHandle, context_length: int, block_tokens: int, model_fingerprint: str,
                 kv_dtype: str, field: str = "kv") -> None:
    """What a reader of the blocks (decode) checks of a handle against its own model and cache."""
    if not handle.block_keys:
        raise InvalidParameter(f"{field}.block_keys", "empty: send a KV handle from prefill, or colocated=true")
    check_lease_id(handle.lease_id, f"{field}.lease_id")
    if not 0 < handle.token_count < context_length:
        raise InvalidParameter(f"{field}.token_count", f"must be in [1, {context_length - 1}], "
                                                       f"got {handle.token_count}")
    if handle.block_tokens != block_tokens:
        raise InvalidParameter(f"{field}.block_tokens", f"{handle.block_tokens}; this worker uses {block_tokens}")
    if handle.model_fingerprint != model_fingerprint:
        raise InvalidParameter(f"{field}.model_fingerprint", "the KV was computed by a different model")
    if (handle.kv_dtype or DEFAULT_KV_DTYPE) != kv_dtype:
        raise InvalidParameter(f"{field}.kv_dtype", f"the KV is {handle.kv_dtype or DEFAULT_KV_DTYPE}, this decode "
                                                    f"worker's cache is {kv_dtype} (run prefill and decode with the "
                                                    f"same --kv-dtype)")
    if len(handle.block_keys) != -(-handle.token_count // block_tokens):
        raise InvalidParameter(f"{field}.block_keys", f"{len(handle.block_keys)} keys for {handle.token_count} tokens")
    check_wait_s(handle.wait_s, f"{field}.wait_s")
    # the lease is renewed with it while the blocks arrive, and a prefetched copy waits that long for its call
    check_lease_ttl(handle.lease_ttl_s, f"{field}.lease_ttl_s")
