"""Two small kvstore shards shared by this folder's tests (one pair of processes for all of them)."""

import pytest

CAPACITY_MB = 0.01  # 10,485 bytes a shard: about ten 300-byte blocks with their overhead


@pytest.fixture(scope="package")
def small_kvstores():
    from pdserve.launcher.stack import Stack, StackSpec

    stack = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=2, kv_capacity_mb=CAPACITY_MB, fault_injection=True))
    stack.start(60)
    assert stack.router is None and len(stack.processes) == 2
    yield stack
    stack.stop()
