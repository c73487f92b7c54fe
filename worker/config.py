"""A worker's settings, built and checked once from its flags (:meth:`WorkerConfig.from_args`) and handed to the
parts that need them: the clock, the scheduler, the runtime, the server and the kvstore client. Only the worker's
``main`` sees the argparse Namespace."""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.common.config import split_targets
from pdserve.common.scheduling import ModeledScheduling, modeled_scheduling
from pdserve.engine.model.synthetic import SYNTHETIC_NAME
from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import Deployment, check_deployment, deployment_from_args
from pdserve.worker.clock import StepClock


@dataclass(frozen=True)
class WorkerConfig:
    scheduler_role: SchedulerRole  # what its scheduler runs (not its mTLS identity's role)
    model: str | None  # a GGUF path, "synthetic", or None for the default model
    block_tokens: int
    kv_dtype: str
    kvstore: tuple[str, ...]  # kvstore shard addresses (none: no kvstore)
    kv_shm: bool
    max_queue: int
    model_step_nice: int
    compute_chunk_tokens: int | None  # prompt tokens per forward here (None: by role, worker/flags.py forward_tokens)
    drain_timeout_s: float
    deployment: Deployment  # the modeled deployment, checked to run
    pace: str
    time_scale: float
    kv_link: str
    scheduler: SchedulerOverrides
    host: str
    port: int
    metrics_host: str
    metrics_port: int

    @classmethod
    def from_args(cls, args, scheduler_role: SchedulerRole) -> WorkerConfig:
        """The settings the flags describe; ValueError (naming the field) for a modeled deployment that cannot run
        or a pacing it cannot keep."""
        deployment = deployment_from_args(args)
        check_deployment(deployment)
        config = cls(scheduler_role=scheduler_role, model=args.model, block_tokens=args.block_tokens, kv_dtype=args.kv_dtype,
                     kvstore=tuple(split_targets(args.kvstore)), kv_shm=args.kv_shm, max_queue=args.max_queue,
                     model_step_nice=args.model_step_nice, compute_chunk_tokens=args.compute_chunk_tokens,
                     drain_timeout_s=args.drain_timeout_s,
                     deployment=deployment, pace=args.pace, time_scale=args.time_scale, kv_link=args.kv_link,
                     scheduler=SchedulerOverrides.from_args(args), host=args.host, port=args.port,
                     metrics_host=args.metrics_host, metrics_port=args.metrics_port)
        config.clock()  # the pacing's checks
        if config.compute_chunk_tokens is not None and config.compute_chunk_tokens < 1:
            raise ValueError(f"--compute-chunk-tokens: {config.compute_chunk_tokens} must be >= 1")
        return config

    def clock(self) -> StepClock:
        """The worker's clock for its modeled deployment, with the KV hand-off into it priced as the simulator prices
        it (the deployment's transfer engine and NICs; a chunked prefill's earlier chunks' KV leaves before it ends)."""
        prefill = modeled_scheduling(self.deployment, SchedulerRole.PREFILL, self.scheduler).config
        return StepClock(self.deployment.timing(), self.pace, self.time_scale, self.deployment.handoff(),
                         prefill.max_num_batched_tokens if prefill.policy.chunked else 0)

    def scheduling(self, kv_blocks: int | None = None, kv_budget: bool | None = None) -> ModeledScheduling:
        """The scheduler a worker runs: its modeled deployment's software profile (one scheduler per attention rank
        under DP attention), the scheduler flags over it. A worker computing with the real model on this machine
        keeps CPU-sized limits (64 sequences, 2,048 tokens a step) unless the flags say otherwise; the synthetic
        backend, which emulates the modeled cluster, takes the modeled engine's. ``kv_blocks`` None: the modeled KV
        capacity."""
        return modeled_scheduling(self.deployment, self.scheduler_role, self.scheduler, kv_blocks, self.block_tokens,
                                  local=str(self.model) != SYNTHETIC_NAME, kv_budget=kv_budget)

    def info_labels(self) -> dict[str, str]:
        """The modeled deployment and pacing, as ``pdserve_deployment_info`` labels them."""
        d = self.deployment
        return dict(perf_model=d.model, perf_hardware=d.hardware, perf_gpus=str(d.gpus), perf_tp=str(d.tp),
                    perf_ep=str(d.ep), perf_software=d.software, perf_dp_attention=str(d.dp_attention).lower(),
                    perf_kv_precision=d.kv_precision or "model", pace=self.pace, time_scale=f"{self.time_scale:g}")
