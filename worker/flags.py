"""Flags and start-up shared by the prefill and decode workers: ``worker_parser`` / ``build_worker`` /
``run_worker`` make each worker's ``main()`` a few lines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

import grpc

from pdserve.common.config import FlagParser, add_model_flags, service_parser, split_targets
from pdserve.common.metrics import set_process_info
from pdserve.common.scheduling import ModeledScheduling, modeled_scheduling
from pdserve.common.server import serve, setup_logging
from pdserve.common.tls import configure_from_args
from pdserve.engine.model.synthetic import SYNTHETIC_NAME
from pdserve.engine.runtime import Runtime, default_served_name
from pdserve.engine.sched.flags import SchedulerOverrides, add_scheduler_args
from pdserve.engine.sched.scheduler import Role
from pdserve.kvstore.client import KVStoreClient
from pdserve.perfmodel.deployment import add_deployment_flag, check_deployment, deployment_from_args
from pdserve.worker.clock import KV_LINKS, PACE_MODES, StepClock
from pdserve.worker.worker import DEFAULT_STEP_NICE, Worker

MAX_SLAB_SEQS = 256  # the decode slab's slots; a larger modeled batch keeps the rest in private KV arrays


def add_clock_flags(parser) -> None:
    """The modeled deployment and the pacing of a worker's clock (each flag also reads its PDSERVE_* variable)."""
    add_deployment_flag(parser)
    parser.add_argument("--kv-link", default="nvlink", choices=KV_LINKS, help="modeled path of the KV hand-off")
    parser.add_argument("--pace", default="off", choices=PACE_MODES,
                        help="realtime: each step lasts at least its modeled time x time-scale")
    parser.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per modeled second when pacing")


def clock_from_args(args) -> StepClock:
    """The worker's clock for the deployment its flags describe; ValueError (naming the field) if it cannot run."""
    deployment = deployment_from_args(args)
    check_deployment(deployment)
    return StepClock(deployment.timing(), args.pace, args.time_scale)


def worker_parser(name: str, default_port: int, max_queue: int) -> FlagParser:
    parser = service_parser(name, default_port)
    add_model_flags(parser)
    parser.add_argument("--kvstore", default="127.0.0.1:50051", help="kvstore address(es), comma separated")
    parser.add_argument("--kv-shm", action="store_true",
                        help="move KV blocks through /dev/shm with kvstores on this host that allow it (--kv-shm "
                             "there too); others get the socket")
    add_scheduler_args(parser)
    parser.add_argument("--max-queue", type=int, default=max_queue, help="requests held before RESOURCE_EXHAUSTED")
    parser.add_argument("--model-step-nice", type=int, default=DEFAULT_STEP_NICE, choices=range(0, 20),
                        metavar="0..19", help="run the model step this much nicer than the rest of the process, so "
                        "that gRPC and KV transfers on shared cores are not starved by compute (0: same priority)")
    parser.add_argument("--drain-timeout-s", type=float, default=60.0,
                        help="on SIGTERM: health NOT_SERVING, new requests refused, and this long for those running "
                             "to finish before the process stops")
    add_clock_flags(parser)
    return parser


def worker_scheduling(args, role: Role, kv_blocks: int | None = None,
                      kv_budget: bool | None = None) -> ModeledScheduling:
    """The scheduler a worker runs: its modeled deployment's software profile (one scheduler per attention rank under
    DP attention), the scheduler flags over it. A worker computing with the real model on this machine keeps
    CPU-sized limits (64 sequences, 2,048 tokens a step) unless the flags say otherwise; the synthetic backend, which
    emulates the modeled cluster, takes the modeled engine's. ``kv_blocks`` None: the modeled KV capacity."""
    return modeled_scheduling(deployment_from_args(args), role, SchedulerOverrides.from_args(args), kv_blocks,
                              args.block_tokens, local=str(args.model) != SYNTHETIC_NAME, kv_budget=kv_budget)


def build_worker(args, role: Role, kv_blocks: int | None = None, slab_tokens: int | None = None,
                 kv_budget: bool | None = None) -> Worker:
    """Load the model and put the scheduler, the clock and the loop together. A modeled deployment (or a scheduler
    flag) that cannot run stops the process with a message naming the field."""
    setup_logging(args.log_level)
    configure_from_args(args, role.value, needs_kv_key=True)
    try:
        clock = clock_from_args(args)
        scheduling = worker_scheduling(args, role, kv_blocks, kv_budget)
    except ValueError as exc:
        raise SystemExit(f"modeled deployment: {exc}") from None
    seqs = scheduling.config.max_num_seqs * scheduling.ranks
    extra = {"slab_seqs": min(seqs, MAX_SLAB_SEQS)} | ({"slab_tokens": slab_tokens} if slab_tokens else {})
    try:
        runtime = Runtime.load(args.model, args.block_tokens, kv_dtype=args.kv_dtype, **extra)
    except ValueError as exc:  # (a 16-bit cache asked of the synthetic backend)
        raise SystemExit(f"--kv-dtype: {exc}") from None
    return Worker(runtime, scheduling.build(runtime.free), clock, args.max_queue, default_served_name(args.model),
                  args.model_step_nice)


async def run_worker(name: str, args, worker: Worker,
                     register: Callable[[grpc.aio.Server, KVStoreClient | None], Iterable[str]]) -> None:
    """Serve a worker until SIGTERM: its loop runs beside the gRPC server; the kvstore client closes at the end."""
    targets = split_targets(args.kvstore)
    kv = KVStoreClient(targets, shm=args.kv_shm) if targets else None
    config = worker.runtime.config
    set_process_info(name, args, worker.served_name, config.fingerprint)
    loop_task = asyncio.create_task(worker.run(), name=f"{name}-steps")
    try:
        await serve(name, args.port, lambda server: register(server, kv), args.metrics_port, args.host,
                    on_stop=lambda: worker.drain(args.drain_timeout_s), metrics_host=args.metrics_host)
    finally:
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop_task
        if kv is not None:
            await kv.close()
