"""The simulated KV hand-off between a prefill and a decode instance: the decode side's pre-allocation, the transfer
lanes of the sending instance, and the hand-off's price (perfmodel/handoff.py, the same call the paced workers make).

As SGLang's decode server does (``disaggregation/decode.py``: the prealloc queue), a request's KV pages are reserved
on the decode instance before its KV is sent; while the decode's KV pool cannot take it (blocks in use, blocks promised
to requests admitted but not yet running, blocks reserved for transfers in flight), the request waits in that
instance's pre-allocation queue, in order, and the prefill keeps its KV. The queue is retried after each decode step
(when finished requests gave blocks back). With DP attention the pool is the ranks' pooled budget, an approximation:
one rank may be full while the pool is not. A transfer then takes the sending instance's first free lane (as many
lanes as its NICs carry transfers at once) for the hand-off's modeled duration.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from pdserve.perfmodel.handoff import HandOff
from pdserve.sim.events import EventQueue
from pdserve.sim.instance import Instance
from pdserve.sim.sequence import SimSequence


class Transfers:
    def __init__(self, clock: EventQueue, block_tokens: int,
                 landed: Callable[[Instance, Instance, SimSequence, HandOff], None]) -> None:
        self.clock = clock
        self.block_tokens = block_tokens
        self.landed = landed
        self._handoffs: dict[tuple[int, int], HandOff] = {}
        self.prealloc: dict[int, deque[tuple[Instance, SimSequence]]] = {}  # per decode instance
        self.reserved: dict[int, int] = {}  # blocks of transfers in flight, per decode instance

    def handoff(self, src: Instance, dst: Instance) -> HandOff:
        key = (id(src.timer), id(dst.timer))
        h = self._handoffs.get(key)
        if h is None:
            h = self._handoffs[key] = HandOff.between(src.timer.timing, dst.timer.timing,
                                                      src.deployment.transfer_engine)
        return h

    def _blocks(self, seq: SimSequence) -> int:
        return -(-(len(seq.prompt_ids) + 1) // self.block_tokens)

    def room(self, dst: Instance, seq: SimSequence) -> bool:
        """Whether the decode instance can pre-allocate the request's pages now."""
        budget = dst.scheduler.budget
        if budget is None:
            return True
        need = self._blocks(seq)
        if need > budget.total_blocks:  # it can never fit: admission refuses it with a clear error
            return True
        promised = self.reserved.get(id(dst), 0) + sum(self._blocks(s) for s in dst.scheduler.waiting)
        return budget.total_blocks - budget.used - promised >= need

    def request(self, src: Instance, dst: Instance, seq: SimSequence) -> None:
        """The prefill is done: send now if the decode can take it, else queue for pre-allocation."""
        queue = self.prealloc.setdefault(id(dst), deque())
        if queue or not self.room(dst, seq):
            queue.append((src, seq))
            return
        self._send(src, dst, seq)

    def drain(self, dst: Instance) -> None:
        """After a decode step: send what the decode's pool can now take, in order."""
        queue = self.prealloc.get(id(dst))
        while queue and self.room(dst, queue[0][1]):
            src, seq = queue.popleft()
            self._send(src, dst, seq)

    def _send(self, src: Instance, dst: Instance, seq: SimSequence) -> None:
        now = self.clock.now
        link = "nvlink" if src.shares_node(dst) else "rdma"
        handoff = self.handoff(src, dst)
        tokens = seq.kv.length
        if len(src.lanes_free_at) != handoff.lanes:
            src.lanes_free_at = [0.0] * handoff.lanes
        lane = min(range(handoff.lanes), key=src.lanes_free_at.__getitem__)
        start = max(now, src.lanes_free_at[lane])
        landed = start + handoff.seconds(tokens, link, src.chunk_tokens)
        src.lanes_free_at[lane] = landed
        seq.transfer_s = landed - now
        nbytes = handoff.kv_bytes(tokens)
        src.stats.transfer_bytes += nbytes
        src.stats.transfers.append((start, nbytes))
        blocks = self._blocks(seq)
        self.reserved[id(dst)] = self.reserved.get(id(dst), 0) + blocks
        self.clock.at(landed, self._arrived, src, dst, seq, handoff, blocks)

    def _arrived(self, src: Instance, dst: Instance, seq: SimSequence, handoff: HandOff, blocks: int) -> None:
        self.reserved[id(dst)] -= blocks  # the decode's scheduler holds it from here
        self.landed(src, dst, seq, handoff)
