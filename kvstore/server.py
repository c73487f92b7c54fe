"""The KVStore gRPC service over a BlockStore."""

from __future__ import annotations

import asyncio
import logging
import math

import grpc
from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.metrics import RPC_BUCKETS, set_process_info

from pdserve.common.server import serve, setup_logging
from pdserve.common.status import abort_code, abort_exhausted
from pdserve.common.config import FlagParser, service_parser
from pdserve.common.tls import configure_from_args
from pdserve.kvstore.wire import chunks_of
from pdserve.kvstore.store import DEFAULT_CAPACITY_MB, MAX_LEASE_TTL_S, BlockStore, ChecksumMismatch, StoreFull, UnknownBlock
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger("pdserve.kvstore")

MAX_KEY_CHARS = 256
MAX_BLOCK_BYTES = 512 << 20
MAX_KEYS_PER_CALL = 65536

OPS = ("put", "get", "lookup", "acquire", "renew", "release")
BYTES_USED = Gauge("pdserve_kvstore_used_bytes", "Bytes of KV blocks held")
CAPACITY = Gauge("pdserve_kvstore_capacity_bytes", "Byte budget of this kvstore")
BLOCKS = Gauge("pdserve_kvstore_blocks", "Blocks held")
LEASED = Gauge("pdserve_kvstore_leased_blocks", "Blocks held by at least one lease")
LEASES = Gauge("pdserve_kvstore_leases", "Live leases (one per request whose KV waits for decode)")
HITS = Counter("pdserve_kvstore_hits_total", "Blocks asked for and found (lookup/acquire: the present prefix)", ["op"])
MISSES = Counter("pdserve_kvstore_misses_total", "Blocks asked for and not found (lookup/acquire: past the prefix)",
                 ["op"])
OP_SECONDS = Histogram("pdserve_kvstore_operation_seconds", "Time of one kvstore operation, streaming included",
                       ["op"], buckets=RPC_BUCKETS)
EVICTIONS = Counter("pdserve_kvstore_evictions_total", "Blocks evicted (least recently used, unleased)")
CHECKSUM_FAILURES = Counter("pdserve_kvstore_checksum_failures_total", "Blocks whose bytes failed their checksum")
PUT_BYTES = Counter("pdserve_kvstore_put_bytes_total", "Bytes received in Put")
GET_BYTES = Counter("pdserve_kvstore_get_bytes_total", "Bytes served by Get")


class KVStoreService(kvstore_pb2_grpc.KVStoreServicer):
    def __init__(self, store: BlockStore, enable_fault_injection: bool = False) -> None:
        self.store = store
        self.enable_fault_injection = enable_fault_injection
        self._evictions_counted = 0
        CAPACITY.set(store.capacity_bytes)
        for op in OPS:
            OP_SECONDS.labels(op)
        for op in ("get", "lookup", "acquire"):
            HITS.labels(op)
            MISSES.labels(op)

    def _update_gauges(self) -> None:
        EVICTIONS.inc(self.store.evictions - self._evictions_counted)
        self._evictions_counted = self.store.evictions
        BYTES_USED.set(self.store.bytes_used)
        BLOCKS.set(len(self.store.blocks))
        LEASED.set(self.store.leased_blocks)
        LEASES.set(len(self.store.leases))

    @staticmethod
    async def _check_keys(keys, context) -> list[str]:
        keys = list(keys)
        if len(keys) > MAX_KEYS_PER_CALL:
            await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT, f"keys: at most {MAX_KEYS_PER_CALL} per call")
        for key in keys:
            if not key or len(key) > MAX_KEY_CHARS:
                await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                    f"keys: each key must have 1..{MAX_KEY_CHARS} characters")
        return keys

    @staticmethod
    async def _check_ttl(ttl: float, context, required: bool) -> float:
        if not math.isfinite(ttl) or (required and ttl <= 0) or ttl < 0 or ttl > MAX_LEASE_TTL_S:
            await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                f"lease_ttl_s: must be in (0, {MAX_LEASE_TTL_S:.0f}], got {ttl}")
        return ttl

    @staticmethod
    def _count_lookup(op: str, asked: int, found: int) -> None:
        HITS.labels(op).inc(found)
        MISSES.labels(op).inc(asked - found)

    async def Put(self, request_iterator, context):
        with OP_SECONDS.labels("put").time():
            return await self._put(request_iterator, context)

    async def _put(self, request_iterator, context):
        stored = duplicates = 0
        lease_id, ttl = "", 0.0
        header, parts, received = None, [], 0

        async def finish_block() -> None:
            nonlocal stored, duplicates, header, parts, received
            if received != header.nbytes:
                await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                    f"data: block {header.key} got {received} of {header.nbytes} bytes")
            try:
                new = self.store.put(header.key, header.token_count, b"".join(parts), header.crc32, lease_id, ttl)
            except ChecksumMismatch as exc:
                CHECKSUM_FAILURES.inc()
                await context.abort(grpc.StatusCode.DATA_LOSS, f"data: {exc}")
            except StoreFull as exc:
                await abort_exhausted(context, str(exc))
            stored += new
            duplicates += not new
            PUT_BYTES.inc(received)
            header, parts, received = None, [], 0

        first = True
        async for chunk in request_iterator:
            if first:
                lease_id, first = chunk.lease_id, False
                ttl = await self._check_ttl(chunk.lease_ttl_s, context, required=bool(lease_id))
            if chunk.HasField("header"):
                if header is not None:
                    await finish_block()
                h = chunk.header
                await self._check_keys([h.key], context)
                if not 1 <= h.token_count <= 1 << 20:
                    await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                        f"header.token_count: must be at least 1, got {h.token_count}")
                if not 0 < h.nbytes <= MAX_BLOCK_BYTES:
                    await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                        f"header.nbytes: must be in 1..{MAX_BLOCK_BYTES}, got {h.nbytes}")
                header = h
            elif chunk.HasField("data"):
                if header is None:
                    await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT, "data: sent before any header")
                received += len(chunk.data)
                if received > header.nbytes:
                    await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                        f"data: block {header.key} exceeds its declared {header.nbytes} bytes")
                parts.append(chunk.data)
        if header is not None:
            await finish_block()
        self._update_gauges()
        return kvstore_pb2.PutReply(stored=stored, duplicates=duplicates)

    async def Get(self, request, context):
        with OP_SECONDS.labels("get").time():
            async for message in self._get(request, context):
                yield message

    async def _get(self, request, context):
        keys = await self._check_keys(request.keys, context)
        blocks = []
        for key in keys:  # resolve (and verify) every block before streaming any
            try:
                blocks.append(self.store.get(key))
                HITS.labels("get").inc()
            except UnknownBlock:
                MISSES.labels("get").inc()
                await context.abort(grpc.StatusCode.NOT_FOUND, f"keys: block {key} is not stored")
            except ChecksumMismatch as exc:
                CHECKSUM_FAILURES.inc()
                self._update_gauges()
                await context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
        for block in blocks:
            header = kvstore_pb2.BlockHeader(key=block.key, token_count=block.token_count, nbytes=len(block.data),
                                             crc32=block.crc32)
            for message in chunks_of(header, block.data, kvstore_pb2.GetChunk):
                yield message
            GET_BYTES.inc(len(block.data))

    async def Lookup(self, request, context):
        with OP_SECONDS.labels("lookup").time():
            keys = await self._check_keys(request.keys, context)
            n = self.store.present_prefix(keys)
            self._count_lookup("lookup", len(keys), n)
            return kvstore_pb2.LookupReply(present_prefix=n)

    async def Acquire(self, request, context):
        keys = await self._check_keys(request.keys, context)
        if not request.lease_id:
            await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT, "lease_id: must not be empty")
        ttl = await self._check_ttl(request.lease_ttl_s, context, required=True)
        with OP_SECONDS.labels("acquire").time():
            n = self.store.acquire(keys, request.lease_id, ttl)
        self._count_lookup("acquire", len(keys), n)
        self._update_gauges()
        return kvstore_pb2.LookupReply(present_prefix=n)

    async def Renew(self, request, context):
        ttl = await self._check_ttl(request.lease_ttl_s, context, required=True)
        with OP_SECONDS.labels("renew").time():
            return kvstore_pb2.LeaseReply(blocks=self.store.renew(request.lease_id, ttl))

    async def Release(self, request, context):
        with OP_SECONDS.labels("release").time():
            n = self.store.release(request.lease_id)
        self._update_gauges()
        return kvstore_pb2.LeaseReply(blocks=n)

    async def Stats(self, request, context):
        s = self.store
        s.expire_leases()
        self._update_gauges()
        return kvstore_pb2.StatsReply(blocks=len(s.blocks), bytes_used=s.bytes_used, capacity_bytes=s.capacity_bytes,
                                      leased_blocks=s.leased_blocks, leases=len(s.leases), evictions=s.evictions,
                                      checksum_failures=s.checksum_failures)

    async def Corrupt(self, request, context):
        if not self.enable_fault_injection:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "fault injection is off (start the kvstore with --enable-fault-injection)")
        try:
            self.store.corrupt(request.key)
        except UnknownBlock:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"key: block {request.key} is not stored")
        return kvstore_pb2.CorruptReply()

    async def expire_loop(self, period_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(period_s)
            if self.store.expire_leases():
                self._update_gauges()


def build_parser() -> FlagParser:
    parser = service_parser("kvstore", 50051)
    parser.add_argument("--capacity-mb", type=float, default=DEFAULT_CAPACITY_MB, help="byte budget for blocks, in MiB")
    parser.add_argument("--enable-fault-injection", action="store_true", env=False,
                        help="allow the Corrupt RPC (tests only; never from the environment)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    configure_from_args(args)
    service = KVStoreService(BlockStore(int(args.capacity_mb * (1 << 20))), args.enable_fault_injection)
    set_process_info("kvstore")

    def register(server):
        kvstore_pb2_grpc.add_KVStoreServicer_to_server(service, server)
        return [kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name]

    async def run() -> None:
        expiry = asyncio.create_task(service.expire_loop())
        try:
            await serve("kvstore", args.port, register, args.metrics_port, args.host)
        finally:
            expiry.cancel()

    asyncio.run(run())
