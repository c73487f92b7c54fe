"""A lease on KV blocks in the kvstore, and who holds it.

Prefill stores a prompt's blocks under a lease so that they are not evicted before decode has its copy; the lease
expires if nobody comes. Every holder goes through :class:`KVLease`, one ``async with`` each:

- the router creates the lease in the kvstore for a request (:meth:`KVLease.create`: only router identities may)
  and holds it (kept renewed while prefill runs), and a copy per extra sample (:meth:`copy`), until the request ends;
- prefill acquires the prompt's stored prefix and stores new blocks under it; on failure leaving the block releases it,
  on success prefill :meth:`hand_over`\\ s it to decode through the KV handle;
- decode :meth:`keep`\\ s it renewed while it fetches, and releases it once it has its copy.

Leaving the ``async with`` releases the lease unless it was handed over. A release is idempotent and never fails
the caller (a lease left behind simply expires); one made while the holder is being cancelled runs in the background.
The id is a random 128-bit capability: it travels only between the internal services (never to clients), and a Get
reads only the blocks its lease holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import grpc

from pdserve.kvstore.client import KVStoreClient
from pdserve.kvstore.contract import DEFAULT_LEASE_TTL_S, new_lease_id, sample_lease_id

log = logging.getLogger("pdserve.kvstore.lease")

_background: set[asyncio.Task] = set()  # releases started while their holder was cancelled
T = TypeVar("T")


class KVLease:
    def __init__(self, kv_client: KVStoreClient | None, lease_id: str, ttl_s: float = DEFAULT_LEASE_TTL_S) -> None:
        """``kv_client`` None: a holder without a kvstore client (e.g. a router in front of colocated workers); nothing to
        acquire or release."""
        self.kv_client = kv_client
        self.lease_id = lease_id
        self.ttl_s = ttl_s
        self.handed_over = False

    @classmethod
    async def create(cls, kv_client: KVStoreClient | None, ttl_s: float = DEFAULT_LEASE_TTL_S) -> KVLease:
        """A lease under a fresh random id, made in the kvstore (holding nothing yet) for one request."""
        lease = cls(kv_client, new_lease_id(), ttl_s)
        if kv_client is not None:
            await lease._made_or_released(kv_client.create_lease(lease.lease_id, ttl_s))
        return lease

    async def acquire(self, keys: list[str]) -> int:
        """Lease the leading ``keys`` the kvstore holds; returns how many."""
        return await self.kv_client.acquire(keys, self.lease_id, self.ttl_s) if keys else 0

    async def copy(self, keys: list[str], sample: int) -> KVLease | None:
        """A second lease, created now, on every one of ``keys`` (for sample ``sample`` of the request to decode
        under), or None (and nothing held) if some are gone."""
        other = KVLease(self.kv_client, sample_lease_id(self.lease_id, sample), self.ttl_s)
        making = self.kv_client.acquire(keys, other.lease_id, self.ttl_s, create=True) if keys else None
        held = await other._made_or_released(making) if making is not None else 0
        if not keys or held < len(keys):
            await other.release()
            return None
        return other

    @contextlib.asynccontextmanager
    async def keep(self, renew_now: bool = True) -> AsyncIterator[None]:
        """Keep the lease renewed while the body runs (a slow fetch, a long wait): at once (``renew_now``; else the
        lease was just made or renewed), then every third of its TTL. A renewal may take until the lease would expire
        (a busy kvstore answers late, not never), and one that fails is tried again soon, not a period later."""
        if self.kv_client is None or not self.lease_id or not 0 < self.ttl_s < math.inf:
            yield
            return
        task = asyncio.create_task(self._renew_forever(renew_now))
        try:
            yield
        finally:
            task.cancel()

    async def _renew_forever(self, renew_now: bool) -> None:
        loop = asyncio.get_running_loop()
        expires = loop.time() + self.ttl_s  # at the latest: whoever stored the blocks set it before now
        if not renew_now:
            await asyncio.sleep(self.ttl_s / 3)
        while True:
            sent = loop.time()
            try:
                await self.kv_client.renew(self.lease_id, self.ttl_s, timeout=max(0.1, expires - sent))
            except grpc.aio.AioRpcError as exc:
                log.warning("lease %s not renewed: %s", self.lease_id, exc.details())
                await asyncio.sleep(min(self.ttl_s / 10, max(0.0, expires - loop.time()) / 4) or 0.05)
                continue
            expires = sent + self.ttl_s  # the kvstore moved the deadline after ``sent``
            await asyncio.sleep(max(0.0, expires - self.ttl_s * 2 / 3 - loop.time()))

    async def _made_or_released(self, making: Awaitable[T]) -> T:
        """Await the kvstore making this lease. Should that fail, or the caller be cancelled meanwhile (a client
        that went away), the lease is released in the background once the kvstore has answered: it may exist on some
        shard by then, and nobody else knows its id. Waiting for the answer first keeps the release from overtaking
        the make."""
        making = asyncio.ensure_future(making)
        try:
            return await asyncio.shield(making)
        except asyncio.CancelledError:
            making.add_done_callback(self._release_once_answered)
            raise
        except BaseException:
            self._release_in_background()
            raise

    def _release_once_answered(self, making: asyncio.Future) -> None:
        if not making.cancelled():
            making.exception()  # retrieved: a failed make is no news to anyone, the release follows either way
        self._release_in_background()

    def _release_in_background(self) -> None:
        task = asyncio.ensure_future(self.release())
        _background.add(task)
        task.add_done_callback(_background.discard)

    def hand_over(self) -> None:
        """The lease goes on to another holder (decode, through the KV handle): leaving the block keeps it."""
        self.handed_over = True

    async def release(self) -> None:
        """Give the lease up: its blocks may be evicted now. Failing to is logged, not raised: it expires."""
        if self.kv_client is None or not self.lease_id:
            return
        try:
            await self.kv_client.release(self.lease_id, timeout=5.0)
        except grpc.aio.AioRpcError as exc:
            log.warning("lease %s not released: %s (it will expire)", self.lease_id, exc.details())

    async def __aenter__(self) -> KVLease:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if self.handed_over:
            return
        if exc_type is not None and issubclass(exc_type, (asyncio.CancelledError, GeneratorExit)):
            self._release_in_background()  # the holder is going away: release without waiting
        else:
            await self.release()
