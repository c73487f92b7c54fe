"""The kvstore's lease RPCs: Acquire (which creates a lease for the router), Renew and Release, and the expiry of
leases nobody renewed. A mixin of :class:`kvstore.server.KVStoreService`, whose store, gauges and waiting Gets it
shares."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import grpc

from pdserve.common.authz import caller_role
from pdserve.common.status import abort_exhausted, abort_invalid
from pdserve.engine.params import InvalidParameter
from pdserve.kvstore import metrics
from pdserve.kvstore.contract import check_lease_id, check_lease_ttl
from pdserve.kvstore.stored import LeaseExists, LeaseQuota, StoreFull, UnknownLease
from pdserve.v1 import kvstore_pb2

T = TypeVar("T")


async def checked(context, check: Callable[[T], T], value: T) -> T:
    """``check(value)`` (a rule of ``kvstore/contract.py``), or INVALID_ARGUMENT naming the field."""
    try:
        return check(value)
    except InvalidParameter as exc:
        await abort_invalid(context, exc)


class LeaseRPCs:
    async def Acquire(self, request, context):
        keys = await self._check_keys(request.keys, context)
        await checked(context, check_lease_id, request.lease_id)
        ttl = await checked(context, check_lease_ttl, request.lease_ttl_s)
        role = caller_role.get()
        if request.create and role not in (None, "router"):  # None: a kvstore run with --insecure-internal
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"create: leases are created by the router, "
                                                                   f"not by role {role}")
        with metrics.OP_SECONDS.labels("acquire").time():
            try:
                if request.create:
                    self.store.create_lease(request.lease_id, ttl, role or "")
                n = self.store.acquire(keys, request.lease_id, ttl)
            except LeaseExists as exc:
                await context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))
            except LeaseQuota as exc:
                await abort_exhausted(context, str(exc))
            except StoreFull as exc:  # a lease's entries are charged to the byte budget
                await abort_exhausted(context, f"lease_id: {exc}")
            except UnknownLease as exc:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        self._count_lookup("acquire", len(keys), n)
        self._update_gauges()
        self._notify()  # a Get waiting for these blocks under this lease may read them now
        return kvstore_pb2.LookupReply(present_prefix=n)

    async def Renew(self, request, context):
        await checked(context, check_lease_id, request.lease_id)
        ttl = await checked(context, check_lease_ttl, request.lease_ttl_s)
        with metrics.OP_SECONDS.labels("renew").time():
            return kvstore_pb2.LeaseReply(blocks=self.store.renew(request.lease_id, ttl))

    async def Release(self, request, context):
        await checked(context, check_lease_id, request.lease_id)
        with metrics.OP_SECONDS.labels("release").time():
            n = self.store.release(request.lease_id)
        self._update_gauges()
        self._notify()  # a Get waiting on this lease's blocks gives up now
        return kvstore_pb2.LeaseReply(blocks=n)

    async def expire_loop(self, period_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(period_s)
            if self.store.expire_leases():
                self._update_gauges()


