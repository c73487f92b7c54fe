"""KV cache poisoning: an attacker stores forged blocks under the keys of a shared system prompt, so that a victim's
request through the authenticated router reuses them. On the default stack a forged Put is refused (no identity, a
role that may not Put, or a block without the stack's MAC), the victim's keys are salted with its tenant anyway, and a
block altered inside the store (bytes and CRC32 rewritten together) is dropped and reported on its next read, never
served: the victim's answer stays what it was."""

import asyncio

import grpc
import pytest

from pdserve.client.client import PdserveClient
from pdserve.engine.kv.blocks import block_keys
from pdserve.kvstore.client import BlockData, KVStoreClient
from pdserve.kvstore.mac import BlockMAC
from pdserve.router.tenancy import TenantSalts
from tests.helpers import router_lease
from tests.kv_faults import corrupt
from tests.stack.conftest import TENANTS

SYSTEM = list(range(3, 35))  # two full blocks every request of the victim starts with
QUESTION = [40, 41, 42, 43, 44, 45, 46]


def answer(stack, question: list[int]) -> list[int]:
    with PdserveClient(stack.router_target, token=TENANTS["alice"]) as c:
        return list(c.complete(token_ids=SYSTEM + question, max_tokens=6, temperature=0, ignore_eos=True).token_ids)


def victims_keys(stack, salted: bool = True) -> list[str]:
    """The keys the victim's system prompt is stored under: only the stack can compute them (the salt's key). Unsalted:
    what anyone can compute from the token ids (the keys of the attack as the issue found it)."""
    with PdserveClient(stack.router_target, token=TENANTS["alice"]) as c:
        fingerprint = c.list_models().models[0].fingerprint
    salt = TenantSalts(stack.identities.identity("router").kv_key).salt("alice") if salted else ""
    return block_keys(SYSTEM, fingerprint, 16, salt=salt)


def stats(stack):
    async def get():
        kv = stack.kv_client("admin")
        try:
            return (await kv.stats())[0]
        finally:
            await kv.close()
    return asyncio.run(get())


def forge(make_client, keys: list[str], lease: str) -> None:
    """Store made-up KV bytes under ``keys``, through the client ``make_client()`` returns."""
    async def put():
        client = make_client()
        try:
            await client.put([BlockData(k, 16, b"\x7f" * 46080 * 2) for k in keys], lease, 30)
        finally:
            await client.close()
    asyncio.run(put())


def test_forged_blocks_are_refused_and_the_victims_answer_stands(tenant_stack, tmp_path):
    from pdserve.common.certs import make_identities
    from pdserve.common.identity import Identity

    stack = tenant_stack
    want = answer(stack, QUESTION)
    keys = victims_keys(stack)
    unsalted = victims_keys(stack, salted=False)
    assert not set(keys) & set(unsalted)
    lease = router_lease(stack)
    target = [stack.kvstores[0].target]
    stranger = Identity.load(make_identities(tmp_path, ["prefill"])["prefill"])  # a prefill identity, another stack
    attempts = {"no identity": (lambda: KVStoreClient(target, identity=None), grpc.StatusCode.UNAVAILABLE),
                "another CA": (lambda: KVStoreClient(target, identity=stranger), grpc.StatusCode.UNAVAILABLE),
                "decode": (lambda: stack.kv_client("decode"), grpc.StatusCode.PERMISSION_DENIED),
                "router": (lambda: stack.kv_client("router"), grpc.StatusCode.PERMISSION_DENIED)}
    for name, (make_client, code) in attempts.items():
        with pytest.raises(grpc.aio.AioRpcError) as err:
            forge(make_client, keys + unsalted, lease)
        assert err.value.code() == code, name
    # the prefill role's certificate, but blocks signed with another stack's key: the MAC gives them away
    mac_failures = stats(stack).mac_failures

    def forger() -> KVStoreClient:
        client = stack.kv_client("prefill")
        client.mac = BlockMAC(b"\x01" * 32)
        return client
    with pytest.raises(grpc.aio.AioRpcError) as err:
        forge(forger, keys, lease)
    assert err.value.code() == grpc.StatusCode.DATA_LOSS and err.value.details().startswith("header.mac:")
    assert stats(stack).mac_failures == mac_failures + 1
    assert answer(stack, QUESTION) == want


def test_a_block_altered_in_the_store_is_dropped_not_served(tenant_stack):
    stack = tenant_stack
    want = answer(stack, [50, 51, 52, 53, 54])  # stores the system prompt's blocks
    keys = victims_keys(stack)
    before = stats(stack)

    async def alter():
        kv = stack.kv_client("test")
        try:
            await corrupt(kv, keys[0], keep_checksum_valid=True)  # an attacker rewriting bytes and CRC32 together
        finally:
            await kv.close()
    asyncio.run(alter())
    recomputed_before = recomputed(stack)
    # the next request reuses the prefix: the kvstore finds the MAC wrong when the block is read (by prefill, or by
    # decode when prefill has it cached) and drops it; the reader computes it instead
    assert answer(stack, [50, 51, 52, 53, 54]) == want
    after = stats(stack)
    assert after.mac_failures == before.mac_failures + 1 and after.checksum_failures == before.checksum_failures
    assert recomputed(stack) == recomputed_before + 1


def recomputed(stack) -> float:
    """Reads that failed a check and were computed instead, by prefill (a reused prefix) or decode (the hand-off)."""
    return sum(stack.scrape(p).get(("pdserve_prefill_kv_integrity_failures_total", ()), 0) for p in stack.prefills) + \
        sum(stack.scrape(p).get(("pdserve_decode_kv_load_failures_total", (("policy", "recompute"),)), 0)
            for p in stack.decodes)
