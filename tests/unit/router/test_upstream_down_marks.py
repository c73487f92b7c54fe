"""The router's workers and the kvstore client's shards are skipped by the same mark (common/retry.py), for the
while their retry policy says, and all of them are tried when every one is down."""

from __future__ import annotations

import asyncio

from pdserve.common.retry import RetryPolicy
from pdserve.kvstore.placement import Placement, rendezvous_ranking
from pdserve.kvstore.shard_health import ShardHealth
from pdserve.router.workers import prefill_pool


def test_a_worker_that_answered_unavailable_is_skipped_for_the_pools_while():
    async def main():
        pool = prefill_pool(["127.0.0.1:1", "127.0.0.1:2"])
        pool.retry = RetryPolicy(down_for_s=60.0)
        first, second = pool.workers
        pool.mark_down(first)
        assert pool.available() == [second]
        pool.mark_down(second)
        assert pool.available() == [first, second]  # all down: try them all, one may be back
        first.down.until = 0.0  # its while is over
        assert pool.available() == [first]
        pool.retry = RetryPolicy(down_for_s=0.0)
        pool.mark_down(first)
        assert pool.available() == [first]
        await pool.close()

    asyncio.run(main())


def test_a_shard_that_answered_unavailable_gives_its_keys_to_the_next_ranked():
    targets = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    health = ShardHealth(targets, RetryPolicy(down_for_s=60.0))
    placement = Placement(targets, health)
    key = "some-block"
    ranking = rendezvous_ranking(key, targets)
    assert placement.choose(key) == ranking[0]
    health.mark_down(ranking[0])
    assert placement.choose(key) == ranking[1]
    assert placement.choose(key, frozenset({ranking[1]})) == ranking[2]
    for shard in ranking:
        health.mark_down(shard)
    assert placement.choose(key) == ranking[0]  # every one down: the ranking as it is
    assert placement.choose(key, frozenset(ranking)) is None
