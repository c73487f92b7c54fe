"""A block as the kvstore client hands it over and gives it back, and the error for one that arrived damaged."""

from __future__ import annotations

from dataclasses import dataclass


class KVIntegrityError(Exception):
    """A fetched block's bytes do not match its checksum (or the store reported a corrupted block)."""


@dataclass
class BlockData:
    key: str
    token_count: int
    data: bytes | bytearray | memoryview  # fetched: a view of the message that carried it when one did
    kv_dtype: str = ""  # element type of its K and V (BlockHeader.kv_dtype; "" from writers that predate it)
