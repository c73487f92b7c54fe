"""A sequence's KV cache and its exchange format: fixed-size blocks (named in engine/kv/blocks.py).

In memory a sequence keeps K and V per layer contiguously (``[layers, kv_heads, capacity, head_dim]``) so attention
reads them as views without gathering. Capacity grows in whole blocks. On the wire the unit is a *block*:
``[layers, 2, block_tokens, kv_heads, head_dim]`` in the cache's dtype (float32, float16 or bfloat16:
engine/kv/dtype.py), so a block exported by prefill and imported by decode restores the same numbers bit for bit.
"""

from __future__ import annotations

import numpy as np

from pdserve.engine.gguf_file import ModelConfig
from pdserve.engine.kv.blocks import DEFAULT_BLOCK_TOKENS
from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE, all_finite, kv_numpy_dtype


def block_nbytes(config: ModelConfig, tokens: int, kv_dtype: str = DEFAULT_KV_DTYPE) -> int:
    return config.n_layers * 2 * tokens * config.n_kv_heads * config.head_dim * kv_numpy_dtype(kv_dtype).itemsize


class SequenceKV:
    """K and V of one sequence for every layer: its own arrays, or a view of one slot of the :class:`KVSlab`.

    ``slot`` is the sequence's slot in the runtime's slab, or None while it keeps private storage; the slab owns
    membership and moves sequences in and out between steps, never during a forward.
    """

    def __init__(self, config: ModelConfig, block_tokens: int = DEFAULT_BLOCK_TOKENS, capacity: int = 0,
                 kv_dtype: str = DEFAULT_KV_DTYPE) -> None:
        self.config = config
        self.block_tokens = block_tokens
        self.kv_dtype = kv_dtype
        self.dtype = kv_numpy_dtype(kv_dtype)
        self.length = 0
        self.slot: int | None = None
        self.k = self.v = _empty(config, self.dtype)  # [layers, kv_heads, capacity, head_dim]
        if capacity:
            self.reserve(capacity)

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    @property
    def num_blocks(self) -> int:
        return -(-self.length // self.block_tokens)

    def reserve(self, tokens: int) -> None:
        """Make room for ``tokens`` tokens in private storage, growing by at least doubling (amortized O(1))."""
        if tokens <= self.capacity:
            return
        if self.slot is not None:
            raise RuntimeError("a slab member grows through its slab (KVSlab.grow), not on its own")
        new_cap = max(tokens, 2 * self.capacity)
        new_cap = -(-new_cap // self.block_tokens) * self.block_tokens
        c = self.config
        shape = (c.n_layers, c.n_kv_heads, new_cap, c.head_dim)
        k = np.zeros(shape, dtype=self.dtype)
        v = np.zeros(shape, dtype=self.dtype)
        k[:, :, :self.length] = self.k[:, :, :self.length]
        v[:, :, :self.length] = self.v[:, :, :self.length]
        self.k, self.v = k, v

    def clear(self) -> None:
        """Drop the cached tokens and their memory (a preempted or finished sequence outside the slab)."""
        if self.slot is not None:
            raise RuntimeError("a slab member is freed by its slab (KVSlab.remove)")
        self.k = self.v = _empty(self.config, self.dtype)
        self.length = 0

    def write(self, layer: int, start: int, k_new: np.ndarray, v_new: np.ndarray) -> None:
        """Store K, V for positions start.. of one layer (rounded to the cache's dtype). k_new, v_new: [n, kv_heads,
        head_dim]."""
        n = k_new.shape[0]
        self.k[layer, :, start:start + n] = k_new.transpose(1, 0, 2)
        self.v[layer, :, start:start + n] = v_new.transpose(1, 0, 2)

    # --- exchange format ---------------------------------------------------------------------------------------
    def export_block(self, index: int) -> memoryview:
        """Block ``index`` as bytes, [layers, 2, n, kv_heads, head_dim]; n < block_tokens only for the tail.

        One copy: K and V are transposed straight into a new buffer of their own (not a view of the cache), whose
        bytes the caller may keep."""
        start = index * self.block_tokens
        end = min(start + self.block_tokens, self.length)
        if not 0 <= start < end:
            raise IndexError(f"block {index} is outside the {self.length} cached tokens")
        c = self.config
        out = np.empty((c.n_layers, 2, end - start, c.n_kv_heads, c.head_dim), dtype=self.dtype)
        out[:, 0] = self.k[:, :, start:end].transpose(0, 2, 1, 3)
        out[:, 1] = self.v[:, :, start:end].transpose(0, 2, 1, 3)
        return memoryview(out.reshape(-1).view(np.uint8))  # (bytes: a buffer cannot carry ml_dtypes' bfloat16)

    def append_block(self, data: bytes, tokens: int, kv_dtype: str | None = None) -> None:
        """Append one block received as bytes; validates its size against the model's shape before reading it.
        ``kv_dtype``: the dtype its writer declared ("" for float32, from writers that predate the field); a block
        of another dtype than this cache's is refused (ValueError naming the field)."""
        if kv_dtype is not None and (kv_dtype or DEFAULT_KV_DTYPE) != self.kv_dtype:
            raise ValueError(f"kv_dtype: the block holds {kv_dtype or DEFAULT_KV_DTYPE} KV, this cache is "
                             f"{self.kv_dtype} (run prefill and decode with the same --kv-dtype)")
        c = self.config
        expected = block_nbytes(c, tokens, self.kv_dtype)
        if tokens <= 0 or tokens > self.block_tokens:
            raise ValueError(f"block token count {tokens} is outside 1..{self.block_tokens}")
        if self.length % self.block_tokens:
            raise ValueError("cannot append a block after a partial block")
        if len(data) != expected:
            raise ValueError(f"block of {tokens} tokens must be {expected} bytes ({self.kv_dtype}), got {len(data)}")
        kv = np.frombuffer(data, dtype=self.dtype).reshape(c.n_layers, 2, tokens, c.n_kv_heads, c.head_dim)
        if not all_finite(kv):
            raise ValueError("block holds non-finite values")
        self.reserve(self.length + tokens)
        s = self.length
        self.k[:, :, s:s + tokens] = kv[:, 0].transpose(0, 2, 1, 3)
        self.v[:, :, s:s + tokens] = kv[:, 1].transpose(0, 2, 1, 3)
        self.length += tokens


def _empty(config: ModelConfig, dtype: np.dtype) -> np.ndarray:
    return np.zeros((config.n_layers, config.n_kv_heads, 0, config.head_dim), dtype=dtype)


class KVSlab:
    """Shared storage for the KV of a running decode batch: ``[layers, slots, kv_heads, capacity, head_dim]``.

    Members occupy slots 0..n-1 with no gaps (removal moves the last one into the hole); each member's K (and V) of
    one layer and head is a contiguous [capacity, head_dim] run, so a decode step attends over the whole batch in one
    compiled pass without a Python loop over sequences and reads only each member's own length. A sequence longer
    than ``max_tokens`` keeps private storage and is attended to on its own.
    """

    def __init__(self, config: ModelConfig, max_slots: int, max_tokens: int,
                 block_tokens: int = DEFAULT_BLOCK_TOKENS, kv_dtype: str = DEFAULT_KV_DTYPE) -> None:
        self.config = config
        self.kv_dtype = kv_dtype
        self.dtype = kv_numpy_dtype(kv_dtype)
        self.max_slots = max_slots
        self.max_tokens = -(-max_tokens // block_tokens) * block_tokens
        self.block_tokens = block_tokens
        self.members: list[SequenceKV] = []
        self._allocate(max_slots, min(self.max_tokens, 8 * block_tokens))

    def _allocate(self, slots: int, capacity: int) -> None:
        c = self.config
        shape = (c.n_layers, slots, c.n_kv_heads, capacity, c.head_dim)
        self.k = np.zeros(shape, dtype=self.dtype)
        self.v = np.zeros(shape, dtype=self.dtype)

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def holds(self, kv: SequenceKV) -> bool:
        return kv.slot is not None and kv.slot < len(self.members) and self.members[kv.slot] is kv

    def can_add(self, tokens: int) -> bool:
        return len(self.members) < self.max_slots and tokens <= self.max_tokens

    def _attach(self, kv: SequenceKV, slot: int) -> None:
        kv.slot = slot
        kv.k, kv.v = self.k[:, slot], self.v[:, slot]

    def add(self, kv: SequenceKV, tokens: int) -> None:
        """Move ``kv`` into the next free slot, with room for ``tokens`` tokens."""
        if kv.slot is not None:
            raise ValueError("sequence is already in a slab")
        if kv.dtype != self.dtype:
            raise ValueError(f"a {kv.kv_dtype} cache cannot join a {self.kv_dtype} slab")
        if not self.can_add(tokens):
            raise ValueError(f"slab is full ({len(self.members)} of {self.max_slots} slots) or {tokens} tokens "
                             f"exceed its {self.max_tokens}-token limit")
        self.grow(max(tokens, kv.length))
        slot = len(self.members)
        n = kv.length
        self.k[:, slot, :, :n] = kv.k[:, :, :n]
        self.v[:, slot, :, :n] = kv.v[:, :, :n]
        self.members.append(kv)
        self._attach(kv, slot)

    def remove(self, kv: SequenceKV, keep: bool = False) -> None:
        """Free ``kv``'s slot; with ``keep`` the sequence takes a private copy of its KV along, else it is emptied."""
        if not self.holds(kv):
            raise ValueError("sequence is not in this slab")
        slot = kv.slot
        if keep:
            kv.k, kv.v = kv.k.copy(), kv.v.copy()
        kv.slot = None
        if not keep:
            kv.clear()
        last = self.members.pop()
        if last is not kv:  # keep slots dense: the last member moves into the hole
            n = last.length
            self.k[:, slot, :, :n] = self.k[:, last.slot, :, :n]
            self.v[:, slot, :, :n] = self.v[:, last.slot, :, :n]
            self.members[slot] = last
            self._attach(last, slot)

    def grow(self, tokens: int) -> None:
        """Room for ``tokens`` tokens in every slot (at most ``max_tokens``)."""
        if tokens <= self.capacity:
            return
        if tokens > self.max_tokens:
            raise ValueError(f"{tokens} tokens exceed the slab's {self.max_tokens}-token limit")
        new_cap = min(self.max_tokens, max(tokens, 2 * self.capacity))
        new_cap = -(-new_cap // self.block_tokens) * self.block_tokens
        old_k, old_v = self.k, self.v
        self._allocate(self.max_slots, new_cap)
        n = len(self.members)
        self.k[:, :n, :, :old_k.shape[3]] = old_k[:, :n]
        self.v[:, :n, :, :old_v.shape[3]] = old_v[:, :n]
        for slot, member in enumerate(self.members):
            self._attach(member, slot)

    def place(self, kv: SequenceKV, tokens: int) -> None:
        """Before a decode step: make room for ``tokens`` tokens, in the slab if they fit, else in private storage."""
        if self.holds(kv):
            if tokens <= self.max_tokens:
                self.grow(tokens)
                return
            self.remove(kv, keep=True)  # outgrew the slab: continue on private storage
        elif self.can_add(tokens):
            self.add(kv, tokens)
            return
        kv.reserve(tokens)

    def free(self, kv: SequenceKV) -> None:
        """Release a sequence's KV memory, wherever it lives."""
        if self.holds(kv):
            self.remove(kv)
        else:
            kv.clear()
