"""Lease pinning: leases kept blocks in the store for up to an hour, anyone could make one, and Release or Decode acted
on any lease id given. On the default stack only the router creates leases (one per request), each caller holds at
most --max-leases-per-caller of them and none lasts past 300 s unrenewed; blocks are stored and read only under an
existing lease that holds them; an id nobody made does nothing."""

import asyncio

import grpc
import pytest

from pdserve.client.client import PdserveClient
from pdserve.kvstore.client import BlockData
from pdserve.kvstore.contract import MAX_LEASE_TTL_S
from tests.helpers import kv_leases, start_stack

MAX_LEASES = 3


@pytest.fixture(scope="module")
def stack(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), extra={"kvstore": ["--max-leases-per-caller", str(MAX_LEASES)]})
    yield stack
    stack.stop()


def run(stack, role: str, work):
    async def go():
        kv = stack.kv_client(role)
        try:
            return await work(kv)
        finally:
            await kv.close()
    return asyncio.run(go())


def status(stack, role: str, work) -> grpc.StatusCode:
    try:
        run(stack, role, work)
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def test_only_the_router_creates_leases_each_bounded_in_time(stack):
    for role in ("prefill", "decode", "admin"):
        assert status(stack, role, lambda kv, role=role: kv.create_lease(f"by-{role}", 30)) == \
            grpc.StatusCode.PERMISSION_DENIED, role
    assert MAX_LEASE_TTL_S == 300
    assert status(stack, "router", lambda kv: kv.create_lease("an-hour", 3600)) == grpc.StatusCode.INVALID_ARGUMENT
    assert status(stack, "router", lambda kv: kv.create_lease("five-minutes", 300)) == grpc.StatusCode.OK
    assert status(stack, "router", lambda kv: kv.create_lease("five-minutes", 300)) == grpc.StatusCode.ALREADY_EXISTS
    run(stack, "router", lambda kv: kv.release("five-minutes"))


def test_a_caller_holds_a_bounded_number_of_leases(stack):
    ids = [f"pin-{i}" for i in range(MAX_LEASES)]
    for lease in ids:
        run(stack, "router", lambda kv, lease=lease: kv.create_lease(lease, 300))
    assert status(stack, "router", lambda kv: kv.create_lease("one-more", 300)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    with PdserveClient(stack.router_target) as c:  # refused up front with retry advice, not stuck
        with pytest.raises(grpc.RpcError) as err:
            c.complete("the end", max_tokens=2)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "kvstore" in err.value.details()
    for lease in ids:
        run(stack, "router", lambda kv, lease=lease: kv.release(lease))
    with PdserveClient(stack.router_target) as c:
        assert c.complete("the end", max_tokens=2, temperature=0).usage.completion_tokens == 2
    assert kv_leases(stack) == 0


def test_blocks_go_in_and_out_only_under_a_lease_that_holds_them(stack):
    block = BlockData("pinned-block", 16, b"kv" * 100)
    assert status(stack, "prefill", lambda kv: kv.put([block], "nobody-made-this", 30)) == \
        grpc.StatusCode.FAILED_PRECONDITION
    run(stack, "router", lambda kv: kv.create_lease("real", 30))
    run(stack, "prefill", lambda kv: kv.put([block], "real", 30))
    run(stack, "router", lambda kv: kv.create_lease("other", 30))
    for lease in ("other", "guessed-id"):  # a lease that does not hold the block reads nothing of it
        assert status(stack, "decode", lambda kv, lease=lease: kv.get(["pinned-block"], lease_id=lease)) == \
            grpc.StatusCode.NOT_FOUND
    # releasing or renewing ids nobody holds does nothing to the real lease
    assert run(stack, "decode", lambda kv: kv.release("guessed-id")) == 0
    assert run(stack, "decode", lambda kv: kv.renew("guessed-id", 30)) == 0
    got = run(stack, "decode", lambda kv: kv.get(["pinned-block"], lease_id="real"))
    assert bytes(got[0].data) == block.data
    assert run(stack, "router", lambda kv: kv.release("real")) == 1
    run(stack, "router", lambda kv: kv.release("other"))
