"""Flags and start-up shared by the prefill and decode workers: ``worker_parser`` / ``worker_config`` /
``build_worker`` / ``run_worker`` make each worker's ``main()`` a few lines. The flags become a
:class:`~pdserve.worker.config.WorkerConfig` once; nothing after ``worker_config`` reads them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

import grpc

from pdserve.common.config import FlagParser, add_model_flags, service_parser
from pdserve.common.metrics import set_process_info
from pdserve.common.server import serve, setup_logging
from pdserve.common.tls import configure_from_args
from pdserve.engine.gguf_file import ModelLoadError
from pdserve.engine.runtime import Runtime, default_served_name
from pdserve.engine.sched.flags import add_scheduler_args
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.kvstore.client import KVStoreClient
from pdserve.perfmodel.deployment import add_deployment_flag
from pdserve.worker.clock import KV_LINKS, PACE_MODES
from pdserve.worker.config import WorkerConfig
from pdserve.worker.forwards import DEFAULT_COMPUTE_CHUNK_TOKENS, forward_tokens
from pdserve.worker.metrics import TOKEN_BUDGET, export_core_share
from pdserve.worker.worker import DEFAULT_STEP_NICE, Worker

MAX_SLAB_SEQS = 256  # the decode slab's slots; a larger modeled batch keeps the rest in private KV arrays


def add_clock_flags(parser) -> None:
    """The modeled deployment and the pacing of a worker's clock (each flag also reads its PDSERVE_* variable)."""
    add_deployment_flag(parser)
    parser.add_argument("--kv-link", default="auto", choices=KV_LINKS,
                        help="modeled path of the KV hand-off (auto: NVLink when a prefill and a decode instance of "
                             "the deployment fit in one node, RDMA otherwise, as the simulator places them)")
    parser.add_argument("--pace", default="off", choices=PACE_MODES,
                        help="realtime: each step lasts at least its modeled time x time-scale")
    parser.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per modeled second when pacing")
    parser.add_argument("--calibration", default=None, metavar="CAL.json",
                        help="the performance model fitted to your own runs (pdserve calibrate)")


def worker_parser(name: str, default_port: int, max_queue: int) -> FlagParser:
    parser = service_parser(name, default_port)
    add_model_flags(parser)
    parser.add_argument("--kvstore", default="127.0.0.1:50051", help="kvstore address(es), comma separated")
    parser.add_argument("--kv-shm", action="store_true",
                        help="move KV blocks through /dev/shm with kvstores on this host that allow it (--kv-shm "
                             "there too); others get the socket")
    add_scheduler_args(parser)
    parser.add_argument("--max-queue", type=int, default=max_queue, help="requests held before RESOURCE_EXHAUSTED")
    parser.add_argument("--compute-chunk-tokens", type=int, default=None,
                        help="prompt tokens one forward computes on this machine; steps are still composed and "
                             "priced by the step budget (--max-num-batched-tokens). Default: "
                             f"{DEFAULT_COMPUTE_CHUNK_TOKENS} on a prefill worker, whose forwards' KV is stored while "
                             "the next computes; the whole step on a decode worker, whose prompts' KV stays where "
                             "it is computed")
    parser.add_argument("--model-step-nice", type=int, default=DEFAULT_STEP_NICE, choices=range(0, 20),
                        metavar="0..19", help="run the model step this much nicer than the rest of the process, so "
                        "that gRPC and KV transfers on shared cores are not starved by compute (0: same priority)")
    parser.add_argument("--drain-timeout-s", type=float, default=60.0,
                        help="on SIGTERM: health NOT_SERVING, new requests refused, and this long for those running "
                             "to finish before the process stops")
    add_clock_flags(parser)
    return parser


def worker_config(args, scheduler_role: SchedulerRole, identity_role: str) -> WorkerConfig:
    """Set up logging and the process's identity (its certificate must name ``identity_role``, an mTLS role of
    ``common/identity.py``), then build the worker's settings from its flags once. A modeled deployment (or a
    scheduler flag) that cannot run stops the process with a message naming the field."""
    setup_logging(args.log_level)
    configure_from_args(args, identity_role, needs_kv_key=True)
    try:
        if getattr(args, "calibration", None):  # the model fitted to the user's own runs (pdserve calibrate)
            from pdserve.perfmodel.calibration import apply_calibration

            apply_calibration(args.calibration, args.deployment or None)
        return WorkerConfig.from_args(args, scheduler_role)
    except (ValueError, FileNotFoundError) as exc:
        raise SystemExit(f"modeled deployment: {exc}") from None


def build_worker(config: WorkerConfig, kv_blocks: int | None = None, slab_tokens: int | None = None,
                 kv_budget: bool | None = None) -> Worker:
    """Load the model and put the scheduler, the clock and the loop together."""
    try:
        scheduling = config.scheduling(kv_blocks, kv_budget)
    except ValueError as exc:
        raise SystemExit(f"modeled deployment: {exc}") from None
    seqs = scheduling.config.max_num_seqs * scheduling.ranks
    extra = {"slab_seqs": min(seqs, MAX_SLAB_SEQS)} | ({"slab_tokens": slab_tokens} if slab_tokens else {})
    try:
        runtime = Runtime.load(config.model, config.block_tokens, kv_dtype=config.kv_dtype, **extra)
    except ModelLoadError as exc:  # not a GGUF file, or not an architecture this runtime runs
        raise SystemExit(f"--model {config.model or '(the default model)'}: {exc}") from None
    except ValueError as exc:  # (a 16-bit cache asked of the synthetic backend)
        raise SystemExit(f"--kv-dtype: {exc}") from None
    TOKEN_BUDGET.labels("step").set(scheduling.config.max_num_batched_tokens)
    chunk = forward_tokens(config.compute_chunk_tokens, config.scheduler_role,
                           scheduling.config.max_num_batched_tokens)
    TOKEN_BUDGET.labels("forward").set(chunk)
    export_core_share(getattr(runtime.model, "parallel", None))
    return Worker(runtime, scheduling.build(runtime.free), config.clock(), config.max_queue,
                  default_served_name(config.model), config.model_step_nice, chunk)


async def run_worker(name: str, config: WorkerConfig, worker: Worker,
                     register: Callable[[grpc.aio.Server, KVStoreClient | None], Iterable[str]]) -> None:
    """Serve a worker until SIGTERM: its loop runs beside the gRPC server; the kvstore client closes at the end."""
    kv_client = KVStoreClient(list(config.kvstore), shm=config.kv_shm) if config.kvstore else None
    set_process_info(name, worker.served_name, worker.runtime.config.fingerprint, config)
    loop_task = asyncio.create_task(worker.run(), name=f"{name}-steps")
    try:
        await serve(name, config.port, lambda server: register(server, kv_client), config.metrics_port, config.host,
                    on_stop=lambda: worker.drain(config.drain_timeout_s), metrics_host=config.metrics_host)
    finally:
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop_task
        if kv_client is not None:
            await kv_client.close()
