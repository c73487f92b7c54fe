"""The KV hand-off contract's rules, each at both edges: what the router makes passes, one step past fails, naming
the field."""

from __future__ import annotations

import math

import grpc
import pytest

from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE
from pdserve.engine.params import InvalidParameter
from pdserve.kvstore import contract
from pdserve.kvstore.contract import (
    MAX_LEASE_ID_CHARS,
    MAX_LEASE_TTL_S,
    MAX_WAIT_S,
    build_handle,
    check_handle,
    check_lease_id,
    check_lease_ttl,
    check_wait_s,
    from_block,
    handle_keys,
    new_lease_id,
    same_blocks,
    sample_lease_id,
    under_lease,
    wait_s_within,
)


def field_of(check, *args) -> str:
    with pytest.raises(InvalidParameter) as err:
        check(*args)
    return err.value.field


def test_the_ids_the_router_makes_pass_the_rule():
    lease_id = new_lease_id()
    assert check_lease_id(lease_id) == lease_id
    assert check_lease_id(sample_lease_id(lease_id, 255)) == f"{lease_id}#255"
    assert new_lease_id() != lease_id


def test_lease_id_length_at_both_edges():
    assert check_lease_id("x") == "x"
    assert check_lease_id("x" * MAX_LEASE_ID_CHARS)
    assert field_of(check_lease_id, "") == "lease_id"
    assert field_of(check_lease_id, "x" * (MAX_LEASE_ID_CHARS + 1)) == "lease_id"


@pytest.mark.parametrize("bad", ["a\nb", "tab\there", "caf\u00e9", "\u00a0", "bell\x07"])
def test_lease_id_is_printable_ascii(bad):
    assert field_of(check_lease_id, bad, "kv.lease_id") == "kv.lease_id"


def test_lease_ttl_at_both_edges():
    assert check_lease_ttl(MAX_LEASE_TTL_S) == MAX_LEASE_TTL_S
    assert check_lease_ttl(math.ulp(0.0)) > 0
    for bad in (0.0, -1.0, math.nextafter(MAX_LEASE_TTL_S, math.inf), math.inf, math.nan):
        assert field_of(check_lease_ttl, bad) == "lease_ttl_s"


def test_wait_s_at_both_edges():
    assert check_wait_s(0.0) == 0.0
    assert check_wait_s(MAX_WAIT_S) == MAX_WAIT_S
    for bad in (-math.ulp(0.0), math.nextafter(MAX_WAIT_S, math.inf), math.inf, math.nan):
        assert field_of(check_wait_s, bad, "kv.wait_s") == "kv.wait_s"


def test_a_request_waits_for_its_blocks_at_most_its_deadline_and_never_past_the_bound():
    assert wait_s_within(None) == MAX_WAIT_S
    assert wait_s_within(MAX_WAIT_S * 2) == MAX_WAIT_S
    assert wait_s_within(1.5) == 1.5


def test_unknown_lease_is_told_apart_by_code_and_text():
    class Err(grpc.aio.AioRpcError):
        def __init__(self, code, details):
            super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)

    assert contract.lease_unknown(Err(grpc.StatusCode.FAILED_PRECONDITION, f"kvstore: {contract.UNKNOWN_LEASE} x"))
    assert not contract.lease_unknown(Err(grpc.StatusCode.NOT_FOUND, contract.UNKNOWN_LEASE))
    assert not contract.lease_unknown(Err(grpc.StatusCode.FAILED_PRECONDITION, "shm: refused"))
    assert not contract.lease_unknown(ValueError(contract.UNKNOWN_LEASE))


BT = 16


def handle(tokens: int = 40, **fields):
    keys = handle_keys([f"k{i}" for i in range(tokens // BT)], "L", tokens, BT)
    made = build_handle(keys, tokens, BT, "L", 30.0, "fp", DEFAULT_KV_DTYPE)
    for name, value in fields.items():
        setattr(made, name, value)
    return made


def check(h, context_length: int = 2048) -> None:
    check_handle(h, context_length, BT, "fp", DEFAULT_KV_DTYPE)


def test_a_handle_prefill_builds_passes_decode_checks():
    h = handle()
    assert list(h.block_keys) == ["k0", "k1", "tail:L:40"]  # the partial tail is scoped to the lease
    assert handle_keys(["k0", "k1"], "L", 32, BT) == ["k0", "k1"]  # whole blocks: no tail
    check(h)
    check(handle(wait_s=MAX_WAIT_S, lease_ttl_s=MAX_LEASE_TTL_S))
    check(handle(token_count=33))  # 3 keys hold 33..48 tokens
    check(handle(kv_dtype=""))  # from a writer that predates the field: the default dtype


@pytest.mark.parametrize("fields, field", [
    ({"lease_id": ""}, "kv.lease_id"),
    ({"lease_id": "x" * (MAX_LEASE_ID_CHARS + 1)}, "kv.lease_id"),
    ({"lease_ttl_s": 0.0}, "kv.lease_ttl_s"),
    ({"lease_ttl_s": MAX_LEASE_TTL_S + 1}, "kv.lease_ttl_s"),
    ({"wait_s": -1.0}, "kv.wait_s"),
    ({"wait_s": MAX_WAIT_S + 1}, "kv.wait_s"),
    ({"block_tokens": 32}, "kv.block_tokens"),
    ({"model_fingerprint": "other"}, "kv.model_fingerprint"),
    ({"kv_dtype": "float32" if DEFAULT_KV_DTYPE != "float32" else "bfloat16"}, "kv.kv_dtype"),
    ({"token_count": 0}, "kv.token_count"),
    ({"token_count": 49}, "kv.block_keys"),  # 3 keys hold 33..48 tokens
    ({"token_count": 32}, "kv.block_keys"),
])
def test_each_handle_field_is_checked(fields, field):
    h = handle()
    for name, value in fields.items():
        setattr(h, name, value)
    assert field_of(check, h) == field


def test_token_count_at_the_context_edge():
    check(handle(tokens=40), context_length=41)
    with pytest.raises(InvalidParameter) as err:
        check(handle(tokens=40), context_length=40)
    assert err.value.field == "kv.token_count"


def test_empty_handle_names_block_keys():
    assert field_of(check, build_handle([], 1, BT, "L", 30.0, "fp", DEFAULT_KV_DTYPE)) == "kv.block_keys"


def test_editing_a_handle_copies_it():
    h = handle()
    copy = under_lease(h, sample_lease_id("L", 1))
    assert copy.lease_id == "L#1" and h.lease_id == "L"
    assert list(copy.block_keys) == list(h.block_keys) and not same_blocks(copy, h)
    rest = from_block(h, 2)
    assert list(rest.block_keys) == list(h.block_keys[2:]) and len(h.block_keys) == 3
    assert rest.token_count == h.token_count and same_blocks(h, handle())
