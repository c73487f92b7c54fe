"""A simulated cluster: prefill, decode (or colocated) instances, the router between them, the KV links, the prefix
cache, and the client's arrivals, all on one virtual clock.

A request arrives (at its offset, or when the client's concurrency cap frees a slot), the router's own policy
(router/policy.py) picks a prefill instance, and after the serving front end's latency (HTTP, tokenization, the hops
to the scheduler: the software's fitted per-request overhead) the instance reuses the cached prefix and computes the
rest in its scheduler's steps (the software's scheduling profile: common/scheduling.py). Once the first token is
sampled the router picks a decode instance (least KV usage, then fewest running); once that instance can
pre-allocate the request's KV (sim/transfers.py) the KV is handed off as perfmodel/handoff.py prices it (the
handshake, then the part of the transfer the prefill's chunks did not already send, over NVLink when both instances
share a node, RDMA otherwise; a prefill instance runs as many transfers at once as its NICs carry, the rest wait for a
free one). With SGLang the first token goes out when the decode side holds the KV and both loops came round (the ends
of the prefill and decode steps in progress: its router streams the decode's output once the prefill's reply, sent at
the prefill loop's next turn, is back too); with vLLM's proxy it is the decode's first step's token. The decode
instance admits it under its KV budget (the modeled deployment's KV capacity), decodes until the workload's output
length, preempting and recomputing when the budget runs out.
Colocated instances take the request whole.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.kv.budget import KVBudgetExceeded
from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.engine.text.stop import FinishReason
from pdserve.perfmodel.deployment import Deployment
from pdserve.perfmodel.handoff import HandOff
from pdserve.router.policy import PrefillPolicy, choose_decode
from pdserve.sim.events import ARRIVAL, KICK, EventQueue
from pdserve.sim.instance import Instance
from pdserve.sim.prefix_cache import PrefixCache, block_keys
from pdserve.sim.sequence import SimSequence
from pdserve.sim.steptime import StepTimer
from pdserve.sim.transfers import Transfers


@dataclass
class SimRequest:
    prompt_ids: list[int]
    output_len: int


@dataclass
class Pool:
    """``count`` instances of one deployment in one role; ``overrides``: the scheduler flags set over the software's
    profile."""

    role: SchedulerRole
    deployment: Deployment
    count: int
    overrides: SchedulerOverrides = field(default_factory=SchedulerOverrides)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"{self.role.value}: instance count must be >= 0, got {self.count}")


@dataclass
class ClusterSpec:
    pools: list[Pool]
    policy: str = "cache_aware"
    block_tokens: int = 16
    prefix_cache_tokens: int | None = None  # None: the prefill instances' total KV capacity; 0: no prefix caching
    kv_blocks: int | None = None  # decode KV budget per instance in blocks; None: the modeled capacity
    frontend: bool = True  # each request first spends the software's fitted per-request overhead in the front end

    @property
    def gpus(self) -> int:
        return sum(p.deployment.gpus * p.count for p in self.pools)

    def describe(self) -> str:
        return " + ".join(f"{p.count} {'colocated' if p.role is SchedulerRole.BOTH else p.role.value} x "
                          f"({p.deployment.shape_label()})" for p in self.pools if p.count)


@dataclass
class SimResult:
    spec: ClusterSpec
    sequences: list[SimSequence]
    failed: dict[int, str]  # index -> why
    instances: list[Instance]
    duration_s: float  # virtual: first arrival to last finish
    wall_s: float
    events: int


class Cluster:
    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.clock = EventQueue()
        self.prefills: list[Instance] = []
        self.decodes: list[Instance] = []  # decode or colocated instances
        timers: dict[tuple, StepTimer] = {}
        gpu_offset = 0
        prefill_kv = 0
        for pool in spec.pools:
            if not pool.count:
                continue
            kv_blocks = spec.kv_blocks if pool.role is not SchedulerRole.PREFILL else None
            scheduling = modeled_scheduling(pool.deployment, pool.role, pool.overrides, kv_blocks, spec.block_tokens)
            d = scheduling.deployment
            key = (d.model, d.hardware, d.gpus, d.tp, d.ep, d.dp_attention, d.dp, d.software, d.kv_precision,
                   d.gpus_per_node, d.two_batch_overlap, d.nics, d.nic_gbps)
            timer = timers.setdefault(key, StepTimer(d.timing()))
            if pool.role is SchedulerRole.PREFILL:
                prefill_kv += d.memory().max_kv_tokens * pool.count
            for _ in range(pool.count):
                if gpu_offset % d.gpus_per_node + d.gpus > d.gpus_per_node and gpu_offset % d.gpus_per_node:
                    gpu_offset += d.gpus_per_node - gpu_offset % d.gpus_per_node  # a multi-node instance starts a node
                group = self.prefills if pool.role is SchedulerRole.PREFILL else self.decodes
                name = f"{pool.role.value[0]}{len(group)}" if pool.role is not SchedulerRole.BOTH else f"c{len(group)}"
                group.append(Instance(name, pool.role, scheduling, gpu_offset // d.gpus_per_node, timer))
                gpu_offset += d.gpus
        if not self.decodes:
            raise ValueError("decode: the cluster needs at least one decode or colocated instance")
        if any(i.role is SchedulerRole.BOTH for i in self.decodes) and self.prefills:
            raise ValueError("colocated: a cluster is either colocated or prefill + decode, not both")
        if any(i.role is SchedulerRole.DECODE for i in self.decodes) and not self.prefills:
            raise ValueError("prefill: decode instances need at least one prefill instance")
        self.policy = PrefillPolicy(spec.policy, spec.block_tokens)
        cache_tokens = prefill_kv if spec.prefix_cache_tokens is None else spec.prefix_cache_tokens
        self.prefix = PrefixCache(cache_tokens // spec.block_tokens)
        self.context_length = self.decodes[0].deployment.profile().max_context or (1 << 30)
        self.max_concurrency: int | None = None
        self.active = 0
        self.backlog: deque[SimSequence] = deque()
        self.sequences: list[SimSequence] = []
        self.failed: dict[int, str] = {}
        self._kicked: set[int] = set()
        self.transfers = Transfers(self.clock, spec.block_tokens, self._landed)

    @property
    def instances(self) -> list[Instance]:
        return self.prefills + self.decodes

    # --- the run ----------------------------------------------------------------------------------------------------
    def run(self, requests: list[SimRequest], offsets: list[float], max_concurrency: int | None = None) -> SimResult:
        if len(offsets) < len(requests):
            raise ValueError("offsets: fewer arrival times than requests")
        started = time.perf_counter()
        self.max_concurrency = max_concurrency
        bt = self.spec.block_tokens
        for i, (req, at) in enumerate(zip(requests, offsets)):
            if req.output_len < 1:
                raise ValueError(f"output_len: request {i} asks for {req.output_len} tokens")
            seq = SimSequence(i, req.prompt_ids, req.output_len, self.context_length,
                              block_keys(req.prompt_ids, bt) if self.prefix.capacity or self.prefills else [], at)
            self.sequences.append(seq)
            self.clock.at(at, self._arrive, seq)
        end = self.clock.run()
        first = min((s.scheduled_s for s in self.sequences), default=0.0)
        return SimResult(self.spec, self.sequences, self.failed, self.instances, end - first,
                         time.perf_counter() - started, self.clock.processed)

    # --- the client ---------------------------------------------------------------------------------------------------
    def _arrive(self, seq: SimSequence) -> None:
        if self.max_concurrency and self.active >= self.max_concurrency:
            self.backlog.append(seq)
            return
        self._start(seq)

    def _start(self, seq: SimSequence) -> None:
        now = self.clock.now
        seq.start_s = now
        self.active += 1
        total = len(seq.prompt_ids) + seq.params.max_tokens
        if total > self.context_length:
            self._fail(seq, f"prompt + output = {total} tokens exceed the context ({self.context_length})")
            return
        if not self.prefills:  # colocated: the router picks a decode worker, which prefills itself
            inst = choose_decode(self.decodes)
            seq.decode_instance = inst.name
        else:
            inst = self.policy.choose(self.prefills, seq.block_keys)
            seq.prefill_instance = inst.name
            inst.inflight += 1
            inst.inflight_tokens += len(seq.prompt_ids)
            seq.cached_tokens = seq.kv.length = self.prefix.reusable_tokens(seq.block_keys, len(seq.prompt_ids),
                                                                            self.spec.block_tokens)
        seq.frontend_s = inst.timer.timing.overheads.request_overhead_s if self.spec.frontend else 0.0
        if seq.frontend_s:
            self.clock.at(now + seq.frontend_s, self._admit, inst, seq)
        else:
            self._admit(inst, seq)

    def _admit(self, inst: Instance, seq: SimSequence) -> None:
        inst.inflight += inst.role is not SchedulerRole.PREFILL  # prefill counted it at routing
        try:
            inst.scheduler.add(seq)
        except KVBudgetExceeded as exc:
            inst.inflight -= 1
            self._fail(seq, f"{inst.name}: {exc}")
            return
        self._kick(inst)

    def _done(self, seq: SimSequence) -> None:
        self.active -= 1
        if self.backlog:
            self._start(self.backlog.popleft())

    def _fail(self, seq: SimSequence, why: str) -> None:
        seq.finish_reason = FinishReason.ERROR
        self.failed[seq.index] = why
        self._done(seq)

    # --- instances ----------------------------------------------------------------------------------------------------
    def _kick(self, inst: Instance) -> None:
        """Start the instance's next step once this instant's arrivals are in (as a worker woken by a submit)."""
        if not inst.busy and id(inst) not in self._kicked:
            self._kicked.add(id(inst))
            self.clock.at(self.clock.now, self._step, inst, priority=KICK)

    def _step(self, inst: Instance) -> None:
        self._kicked.discard(id(inst))
        if inst.busy:
            return
        begun = inst.begin_step(self.clock.now)
        if begun is not None:
            step, seconds = begun
            self.clock.at(self.clock.now + seconds, self._step_done, inst, step, priority=ARRIVAL)

    def _step_done(self, inst: Instance, step) -> None:
        now = self.clock.now
        for seq, result in inst.end_step(step, now):
            if inst.role is SchedulerRole.PREFILL:
                self._prefilled(inst, seq)
            elif result.finished:
                inst.inflight -= 1
                seq.finish_s = seq.last_token_s  # (later than now for tokens held back behind the first)
                self._done(seq)
        if inst.role is SchedulerRole.DECODE:
            self.transfers.drain(inst)  # finished requests gave blocks back: pre-allocate waiting hand-offs
        self._step(inst)  # the worker loop goes straight on

    def _prefilled(self, inst: Instance, seq: SimSequence) -> None:
        """Prefill sampled the first token: store the prompt's blocks, pick a decode instance, send the KV."""
        now = self.clock.now
        inst.inflight -= 1
        inst.inflight_tokens -= len(seq.prompt_ids)
        inst.remember(seq.block_keys)
        self.prefix.store(seq.block_keys)
        if seq.finished:  # the first token already ended it (output length 1)
            seq.finish_s = now
            self._done(seq)
            return
        dst = choose_decode(self.decodes)
        seq.decode_instance = dst.name
        dst.inflight += 1  # chosen now, before the KV lands (as the router's count)
        self.transfers.request(inst, dst, seq)

    def _landed(self, src: Instance, dst: Instance, seq: SimSequence, handoff: HandOff) -> None:
        """The decode side holds the KV. SGLang: the first token goes out once both loops came round (the prefill's,
        which sends its reply, and the decode's, which admits the request); vLLM: with the decode's first step."""
        now = self.clock.now
        if handoff.engine.first_token == "decode_step":
            seq.first_from_decode = True
            seq.last_token_s = now
        else:
            turns = [now] + [i.busy_until for i in (src, dst) if i.busy]
            seq.first_token_s = seq.last_token_s = max(turns)
        dst.inflight -= 1  # _admit counts it again
        self._admit(dst, seq)
