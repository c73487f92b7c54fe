"""KV correctness: incremental decode equals full recomputation; blocks survive export/import; the slab is exact."""

import numpy as np
import pytest

from pdserve.engine.kv.blocks import block_keys
from pdserve.engine.kv.cache import KVSlab, SequenceKV, block_nbytes
from pdserve.engine.params import SamplingParams


def recompute_logits(model, ids):
    return model.prefill([model.new_kv()], [list(ids)])[0]


@pytest.mark.parametrize("lengths", [[7], [3, 16, 29]])
def test_prefill_then_decode_equals_recompute(tiny_runtime, lengths):
    model = tiny_runtime.model
    rng = np.random.default_rng(3)
    seqs = [rng.integers(3, model.config.vocab_size, n).tolist() for n in lengths]
    caches = [model.new_kv() for _ in seqs]
    logits = model.prefill(caches, seqs)
    for _ in range(12):
        tokens = [int(np.argmax(row)) for row in logits]
        for ids, t in zip(seqs, tokens):
            ids.append(t)
        logits = model.decode_step(caches, tokens)
        for row, ids in zip(logits, seqs):
            full = recompute_logits(model, ids)
            assert int(np.argmax(row)) == int(np.argmax(full))
            np.testing.assert_allclose(row, full, rtol=1e-4, atol=1e-4)


def _prefilled(model, seed: int, lengths: tuple[int, ...]):
    """Random prompts of these lengths, their caches after prefill, and the prefill's logits."""
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(3, model.config.vocab_size, n).tolist() for n in lengths]
    caches = [model.new_kv() for _ in seqs]
    return seqs, caches, model.prefill(caches, seqs)


def test_slab_members_and_private_caches_agree(tiny_runtime):
    """Decode through the shared slab (batched attention, compaction, overflow to private) equals recompute."""
    model = tiny_runtime.model
    seqs, caches, logits = _prefilled(model, 4, (5, 20, 40))
    slab = KVSlab(model.config, max_slots=3, max_tokens=48, block_tokens=16)
    for step in range(14):  # caches[2] outgrows the 48-token slab and moves out mid-way
        tokens = [int(np.argmax(row)) for row in logits]
        for ids, t in zip(seqs, tokens):
            ids.append(t)
        if step == 5:
            slab.remove(caches[2], keep=True)  # compaction moves caches[0]'s slot
        for kv in (caches[2], caches[0]):  # caches[1] stays private: a mixed batch
            slab.place(kv, kv.length + 1)
        logits = model.decode_step(caches, tokens, slab)
        for row, ids in zip(logits, seqs):
            np.testing.assert_allclose(row, recompute_logits(model, ids), rtol=1e-4, atol=1e-4)
    assert not slab.holds(caches[2]) and caches[2].slot is None and slab.holds(caches[0])


def test_slab_batch_in_any_row_order(tiny_runtime):
    """A decode batch listed in another order than the slab's slots gives each row its own sequence's logits."""
    model = tiny_runtime.model
    seqs, caches, logits = _prefilled(model, 5, (9, 30, 17))
    slab = KVSlab(model.config, max_slots=3, max_tokens=64, block_tokens=16)
    for kv in caches:
        slab.place(kv, kv.length + 1)
    order = [2, 0, 1]  # rows in neither slot order nor its reverse
    tokens = [int(np.argmax(logits[i])) for i in order]
    for i, t in zip(order, tokens):
        seqs[i].append(t)
    rows = model.decode_step([caches[i] for i in order], tokens, slab)
    for row, i in zip(rows, order):
        np.testing.assert_allclose(row, recompute_logits(model, seqs[i]), rtol=1e-4, atol=1e-4)


def test_freeing_a_sequence_releases_its_memory(tiny_runtime):
    """Preemption and finishing drop the KV arrays themselves, in the slab and in private storage alike."""
    runtime = tiny_runtime
    params = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    a, b = (runtime.new_sequence(list(range(3, 40)), params) for _ in range(2))
    runtime.prefill([(a, 37), (b, 37)])
    runtime.decode_step([a])  # a joins the slab; b keeps its private arrays
    assert runtime.slab.holds(a.kv) and b.kv.k.size > 0
    runtime.free(a)
    runtime.free(b)
    assert not runtime.slab.holds(a.kv) and a.kv.k.size == 0 and a.kv.length == 0
    assert b.kv.k.size == 0 and b.kv.v.size == 0 and b.kv.length == 0


def test_blocks_export_import_continue_identically(tiny_runtime):
    runtime = tiny_runtime
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    prompt = list(range(3, 40))  # 37 tokens: 2 full blocks and a partial one
    a = runtime.new_sequence(prompt, params)
    runtime.prefill([(a, len(prompt))])
    blocks = [(a.kv.export_block(i), min(16, a.kv.length - 16 * i)) for i in range(a.kv.num_blocks)]
    assert [n for _, n in blocks] == [16, 16, 5]
    assert all(len(data) == block_nbytes(runtime.config, n) for data, n in blocks)
    layout = np.frombuffer(blocks[1][0], dtype="<f4").reshape(runtime.config.n_layers, 2, 16, -1, a.kv.k.shape[-1])
    assert np.array_equal(layout[:, 0], a.kv.k[:, :, 16:32].transpose(0, 2, 1, 3))  # [layers, K/V, token, head, dim]
    assert np.array_equal(layout[:, 1], a.kv.v[:, :, 16:32].transpose(0, 2, 1, 3))
    kept, cached = bytes(blocks[1][0]), a.kv.k[:, :, 16:32].copy()
    a.kv.k[:, :, 16:32] += 1.0  # the exported bytes are the block's own, not a view of the cache
    assert bytes(blocks[1][0]) == kept
    a.kv.k[:, :, 16:32] = cached

    b = runtime.new_sequence(prompt, params)
    for data, n in blocks:
        b.kv.append_block(data, n)
    b.append_token(a.output_ids[0])  # decode receives the first token from prefill
    assert np.array_equal(b.kv.k[:, :, :37], a.kv.k[:, :, :37])
    for _ in range(10):
        runtime.decode_step([a])
        runtime.decode_step([b])
    assert b.output_ids == a.output_ids


def test_block_import_rejects_bad_bytes(tiny_runtime):
    kv = SequenceKV(tiny_runtime.config)
    with pytest.raises(ValueError, match="bytes"):
        kv.append_block(b"\0" * 10, 16)
    nan_block = np.full(block_nbytes(tiny_runtime.config, 4) // 4, np.nan, dtype=np.float32).tobytes()
    with pytest.raises(ValueError, match="non-finite"):
        kv.append_block(nan_block, 4)


def test_block_keys_are_chained_and_stable():
    ids = list(range(100))
    keys = block_keys(ids, "fp", 16)
    assert len(keys) == 6  # full blocks only
    assert keys == block_keys(ids[:96] + [1, 2, 3], "fp", 16)  # same prefix, same keys
    changed = block_keys([999] + ids[1:], "fp", 16)
    assert all(x != y for x, y in zip(keys, changed))  # a change in block 0 changes every later key
    assert block_keys(ids, "other-model", 16)[0] != keys[0]
    assert keys[0] == block_keys(ids, "fp", 16)[0]


@pytest.mark.parametrize("weight_type,tolerance", [("F16", 0.002), ("BF16", 0.01), ("Q8_0", 0.03), ("Q5_0", 0.15),
                                                   ("Q5_1", 0.15), ("Q4_1", 0.4), ("Q4_0", 0.3)])
def test_quantized_weight_types_load_and_match_f32(tmp_path, weight_type, tolerance):
    """Every supported tensor type dequantizes to weights whose logits stay near the F32 original."""
    from pdserve.engine.runtime import Runtime
    from tests.tiny_model import write_tiny_model

    reference_rt = Runtime.load(write_tiny_model(tmp_path / "f32.gguf"))
    quantized_rt = Runtime.load(write_tiny_model(tmp_path / f"{weight_type}.gguf", weight_type=weight_type))
    prompt = [[5, 17, 42, 99, 150, 7]]
    ref = reference_rt.model.prefill([reference_rt.model.new_kv()], prompt)[0]
    got = quantized_rt.model.prefill([quantized_rt.model.new_kv()], prompt)[0]
    assert got.dtype == np.float32
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < tolerance


@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_causal_attention_matches_a_float64_reference(tiny_runtime, monkeypatch, threads):
    """Prefill attention in query blocks (with a cached prefix, more queries than one block, on one thread or the
    blocks shared by two) equals plain causal softmax attention computed in float64, up to float32 summation order."""
    from pdserve.engine.model.kernels.parallel import Parallel
    from pdserve.engine.model.llama import QUERY_BLOCK

    model = tiny_runtime.model
    monkeypatch.setattr(model, "parallel", Parallel(threads))
    c = model.config
    rng = np.random.default_rng(6)
    start, n = 40, 3 * QUERY_BLOCK + 60
    kv = model.new_kv(capacity=start + n)
    kv.k[0, :, :start + n] = rng.standard_normal((c.n_kv_heads, start + n, c.head_dim)).astype(np.float32)
    kv.v[0, :, :start + n] = rng.standard_normal((c.n_kv_heads, start + n, c.head_dim)).astype(np.float32)
    q = rng.standard_normal((n, c.n_heads, c.head_dim)).astype(np.float32)
    got = model._attend(q, kv, 0, start)  # [n, H*D]

    keys = kv.k[0, :, :start + n].astype(np.float64)
    values = kv.v[0, :, :start + n].astype(np.float64)
    want = np.empty((n, c.n_heads, c.head_dim))
    for h in range(c.n_heads):
        kvh = h // c.group_size
        scores = q[:, h].astype(np.float64) @ keys[kvh].T / np.sqrt(c.head_dim)  # [n, T]
        scores[np.arange(start + n)[None, :] > (start + np.arange(n))[:, None]] = -np.inf
        probs = np.exp(scores - scores.max(axis=1, keepdims=True))
        want[:, h] = (probs / probs.sum(axis=1, keepdims=True)) @ values[kvh]
    np.testing.assert_allclose(got, want.reshape(n, -1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("slots, lengths", [([3, 0, 4], [290, 1, 137]), ([2], [290]), ([4, 1], [290, 7])])
def test_slab_decode_attention_matches_a_float64_reference(threads, slots, lengths):
    """The compiled decode attention (slots in any order, members of different lengths; on one thread, or split over
    two by sequence and head or, for a single sequence, by position) equals softmax attention in float64 over each
    member's own keys, up to float32 summation order."""
    from pdserve.engine.model.decode_attention import DecodeAttention
    from pdserve.engine.model.kernels.parallel import Parallel

    rng = np.random.default_rng(7)
    n_slots, n_kv, group, dim, capacity = 5, 3, 3, 64, 300
    keys = rng.standard_normal((n_slots, n_kv, capacity, dim)).astype(np.float32)
    values = rng.standard_normal((n_slots, n_kv, capacity, dim)).astype(np.float32)
    slots, lengths = np.array(slots, dtype=np.int64), np.array(lengths, dtype=np.int64)
    q = rng.standard_normal((len(slots), n_kv, group, dim)).astype(np.float32)
    keys[:, :, 290:] = np.nan  # past every member's end: must never be read
    values[:, :, 290:] = np.nan
    got = DecodeAttention(Parallel(threads), min_split_keys=0)(q, keys, values, slots, lengths)

    assert got.dtype == np.float32 and got.shape == q.shape
    for row, (slot, n) in enumerate(zip(slots, lengths)):
        k, v = keys[slot, :, :n].astype(np.float64), values[slot, :, :n].astype(np.float64)  # [KVH, n, D]
        scores = q[row].astype(np.float64) @ k.transpose(0, 2, 1)  # [KVH, g, n]
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        want = (probs / probs.sum(axis=-1, keepdims=True)) @ v
        np.testing.assert_allclose(got[row], want, rtol=1e-4, atol=1e-5)
