"""The kvstore service checks the KV hand-off contract (kvstore/contract.py) on every lease RPC."""

import grpc
import pytest

from tests.stack.kvstore.test_kvstore_service import Roles, block, run


@pytest.fixture(scope="module")
def one_kvstore():
    from pdserve.launcher.stack import Stack, StackSpec

    stack = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=1, fault_injection=True))  # (Roles has a test client)
    stack.start(60)
    yield stack
    stack.stop()


@pytest.mark.parametrize("lease_id", ["x" * 129, "tab\there", "caf\u00e9"])
def test_every_lease_rpc_checks_the_contracts_lease_id_rule(one_kvstore, lease_id):
    """Acquire, Renew, Release, Put and Get refuse an id outside the contract's rule (kvstore/contract.py), naming
    the field, before the store sees it; the longest id the rule allows is made and used as any other."""
    target = one_kvstore.kvstores[0].target

    async def scenario():
        kv = Roles(one_kvstore, [target])
        calls = {"acquire": lambda: kv.router.create_lease(lease_id, 60),
                 "renew": lambda: kv.router.renew(lease_id, 60), "release": lambda: kv.router.release(lease_id),
                 "put": lambda: kv.prefill.put([block(900)], lease_id, 60),
                 "get": lambda: kv.prefill.get(["blk900"], lease_id=lease_id)}
        try:
            for name, call in calls.items():
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call()
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
                assert err.value.details().startswith("lease_id: must be 1..128 printable ASCII"), name
            n = 901 + len(lease_id)  # a lease and a block of each case's own: a released id is never made again
            longest = await kv.lease(str(n).ljust(128, "L"))
            assert await kv.prefill.put([block(n)], longest, 60) == 1
            assert [b.key for b in await kv.prefill.get([f"blk{n:03d}"], lease_id=longest)] == [f"blk{n:03d}"]
            await kv.router.release(longest)
        finally:
            await kv.close()

    run(scenario())
