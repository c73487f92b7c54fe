"""``python -m pdserve.kvstore``: the flags, and the service registered with Put and Get on the wire format."""

from __future__ import annotations

import asyncio
import logging

import grpc

from pdserve.common.config import FlagParser, service_parser
from pdserve.common.metrics import set_process_info
from pdserve.common.server import serve, setup_logging
from pdserve.common.tls import configure_from_args, identity
from pdserve.kvstore import shm
from pdserve.kvstore.faults import KVStoreFaultsService
from pdserve.kvstore.mac import BlockMAC
from pdserve.kvstore.memory import keep_freed_memory
from pdserve.kvstore.server import KVStoreService
from pdserve.kvstore.store import DEFAULT_CAPACITY_MB, DEFAULT_MAX_BLOCKS, DEFAULT_MAX_LEASES_PER_OWNER, BlockStore
from pdserve.kvstore.wire import decoder, serialize
from pdserve.testing.v1 import kvstore_faults_pb2, kvstore_faults_pb2_grpc
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger("pdserve.kvstore")


class _Handlers:
    """Stands in for a server to catch the generated code's method handlers."""

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.service, self.handlers = service, handlers


def add_to_server(service: KVStoreService, server: grpc.aio.Server) -> None:
    """Register the service as the generated code would, except that Put reads and Get writes data messages without
    the protobuf runtime (kvstore.wire: same bytes on the wire, fewer copies)."""
    caught = _Handlers()
    kvstore_pb2_grpc.add_KVStoreServicer_to_server(service, caught)
    handlers = dict(caught.handlers)
    handlers["Put"] = grpc.stream_unary_rpc_method_handler(
        service.Put, request_deserializer=decoder(kvstore_pb2.PutChunk),
        response_serializer=kvstore_pb2.PutReply.SerializeToString)
    handlers["Get"] = grpc.unary_stream_rpc_method_handler(
        service.Get, request_deserializer=kvstore_pb2.GetRequest.FromString, response_serializer=serialize)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(caught.service, handlers),))
    server.add_registered_method_handlers(caught.service, handlers)


def build_parser() -> FlagParser:
    parser = service_parser("kvstore", 50051)
    parser.add_argument("--capacity-mb", type=float, default=DEFAULT_CAPACITY_MB,
                        help="memory budget in MiB: blocks with their overhead, lease bookkeeping, Puts arriving")
    parser.add_argument("--max-blocks", type=int, default=DEFAULT_MAX_BLOCKS, help="blocks held at most, whatever "
                        "their size (the least recently used unleased block makes room)")
    parser.add_argument("--enable-fault-injection", action="store_true", env=False,
                        help="serve pdserve.testing.v1.KVStoreFaults (tests only; never from the environment)")
    parser.add_argument("--kv-shm", action="store_true",
                        help="let clients on this host (of this user) move block bytes through shared memory they "
                             "pass over a Unix socket, instead of the gRPC socket (they ask with their own --kv-shm)")
    parser.add_argument("--max-leases-per-caller", type=int, default=DEFAULT_MAX_LEASES_PER_OWNER,
                        help="leases one caller identity may hold at once (more are RESOURCE_EXHAUSTED)")
    return parser


def shm_files(args) -> shm.ShmRegistry | None:
    """With --kv-shm: the socket clients register their shared-memory files on (None where that cannot be)."""
    if not args.kv_shm:
        return None
    if args.port == 0:
        raise SystemExit("--kv-shm: needs a fixed --port (clients find the shared-memory socket by it)")
    if not shm.available():
        raise SystemExit("--kv-shm: needs Linux (memfd_create and SCM_RIGHTS)")
    try:
        return shm.ShmRegistry(args.port)
    except OSError as exc:  # no private directory, or the socket cannot be made: serve KV over gRPC only
        log.warning("--kv-shm: cannot open the shared-memory socket for port %d (%s); serving without shared "
                    "memory (clients fall back to gRPC)", args.port, exc.strerror or exc)
        return None


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    configure_from_args(args, "kvstore", needs_kv_key=True)
    if args.max_leases_per_caller < 1:
        raise SystemExit("--max-leases-per-caller: must be at least 1")
    keep_freed_memory()
    if not args.capacity_mb > 0 or args.max_blocks < 1:
        raise SystemExit("--capacity-mb and --max-blocks: must be positive")
    ident = identity()
    store = BlockStore(int(args.capacity_mb * (1 << 20)), max_blocks=args.max_blocks,
                       mac=BlockMAC(ident.kv_key) if ident else None, max_leases_per_owner=args.max_leases_per_caller)
    service = KVStoreService(store, shm_files(args))
    set_process_info("kvstore")

    def register(server):
        add_to_server(service, server)
        names = [kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name]
        if args.enable_fault_injection:
            kvstore_faults_pb2_grpc.add_KVStoreFaultsServicer_to_server(KVStoreFaultsService(store), server)
            names.append(kvstore_faults_pb2.DESCRIPTOR.services_by_name["KVStoreFaults"].full_name)
        return names

    async def run() -> None:
        expiry = asyncio.create_task(service.expire_loop())
        try:
            await serve("kvstore", args.port, register, args.metrics_port, args.host, metrics_host=args.metrics_host)
        finally:
            expiry.cancel()

    asyncio.run(run())
