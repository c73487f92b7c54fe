"""One request's progress through the router, and its usage and timings in both clocks."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pdserve.kvstore.lease import KVLease
from pdserve.v1 import common_pb2, decode_pb2, prefill_pb2


@dataclass
class Inflight:
    """A request in flight, as the Abort RPC sees it: the upstream calls it opened, to cancel from another RPC."""

    calls: list = field(default_factory=list)  # grpc.aio calls (cancelling a finished one is a no-op)
    aborted: bool = False

    def track(self, call) -> None:
        self.calls.append(call)
        if self.aborted:  # aborted between two calls: this one must not run either
            call.cancel()

    def abort(self) -> None:
        """Cancel every call: whatever the request awaits raises CancelledError, the workers free its KV."""
        self.aborted = True
        for call in self.calls:
            call.cancel()


@dataclass
class RequestState:
    request_id: str
    prompt_len: int
    colocated: bool = False
    started: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    completion_tokens: int = 0
    output_ids: list[int] = field(default_factory=list)  # every token relayed to the client so far
    resumes: int = 0  # times the decode stream moved to another worker mid-stream
    cached_tokens: int = 0
    # wall clock, named as the workers report them and as the client gets them (common.v1.Timings)
    queue_wall_s: float = 0.0
    prefill_queue_wall_s: float = 0.0  # the part of queue_wall_s before the first token
    kv_store_wall_s: float = 0.0
    kv_fetch_wall_s: float = 0.0
    lease: KVLease | None = None  # the router's hold on the sample's KV, until a decode worker has taken it
    finish_reason: str = ""  # set once the sample's last chunk went out
    # modeled clock, as reported by the workers
    frontend_modeled_s: float = 0.0  # the modeled deployment's front end before the prompt's worker admitted it
    prefill_turn_modeled_s: float = 0.0  # SGLang: the prefill's next step, which its reply waits for
    queue_modeled_s: float = 0.0
    prefill_modeled_s: float = 0.0
    kv_transfer_modeled_s: float = 0.0
    decode_wait_modeled_s: float = 0.0  # decode admission queue before the first decode step
    decode_modeled_s: float = 0.0

    def took_prefill(self, reply: prefill_pb2.PrefillReply) -> None:
        self.cached_tokens = reply.cached_tokens
        self.queue_wall_s = self.prefill_queue_wall_s = reply.queue_wall_s
        self.kv_store_wall_s = reply.kv_store_wall_s
        self.frontend_modeled_s = reply.frontend_modeled_s
        self.prefill_turn_modeled_s = reply.next_turn_modeled_s
        self.queue_modeled_s = reply.queue_modeled_s
        self.prefill_modeled_s = reply.modeled_s

    def hand_over_lease(self) -> None:
        """A decode worker streams the sample: it has fetched the KV and releases the lease itself, so the router's
        hold on it ends without a release."""
        if self.lease is not None:
            self.lease.hand_over()

    def took_decode_timings(self, chunk: decode_pb2.DecodeChunk) -> None:
        self.kv_fetch_wall_s += chunk.kv_fetch_wall_s
        self.queue_wall_s += chunk.queue_wall_s
        self.kv_transfer_modeled_s += chunk.kv_transfer_modeled_s
        self.decode_modeled_s += chunk.decode_modeled_s
        if self.colocated:  # the decode worker's front end, queue and prefill come before the first token
            self.frontend_modeled_s += chunk.frontend_modeled_s
            self.queue_modeled_s += chunk.queue_modeled_s
            self.prefill_modeled_s += chunk.prefill_modeled_s
        else:
            self.decode_wait_modeled_s += chunk.queue_modeled_s

    def queue_before_first_token(self) -> tuple[float, float]:
        """(wall, modeled) seconds queued before the first token: prefill's queue, or colocated decode's."""
        if self.colocated:
            return self.queue_wall_s, self.queue_modeled_s
        return self.prefill_queue_wall_s, self.queue_modeled_s

    def took_tokens(self, ids) -> None:
        if self.first_token_at is None and ids:
            self.first_token_at = time.perf_counter()
        self.output_ids.extend(ids)
        self.completion_tokens += len(ids)

    def timings(self) -> common_pb2.Timings:
        now = time.perf_counter()
        e2e = now - self.started
        ttft = (self.first_token_at or now) - self.started
        tpot = (e2e - ttft) / (self.completion_tokens - 1) if self.completion_tokens > 1 else 0.0
        # the modeled engines' first token reaches the client from the decode side, after the hand-off and the
        # decode's admission (SGLang's decode server, vLLM's proxy), and with SGLang no sooner than the prefill's reply,
        # sent at its loop's next turn: the simulator counts it so (sim/cluster.py)
        prefilled = self.frontend_modeled_s + self.queue_modeled_s + self.prefill_modeled_s
        admitted = prefilled + self.kv_transfer_modeled_s + self.decode_wait_modeled_s
        ttft_m = max(admitted, prefilled + self.prefill_turn_modeled_s)
        e2e_m = max(ttft_m, admitted + self.decode_modeled_s)  # tokens decoded meanwhile go out with the first
        tpot_m = (e2e_m - ttft_m) / (self.completion_tokens - 1) if self.completion_tokens > 1 else 0.0
        return common_pb2.Timings(
            queue_wall_s=self.queue_wall_s, ttft_wall_s=ttft, tpot_wall_s=tpot, e2e_wall_s=e2e,
            kv_handoff_wall_s=self.kv_store_wall_s + self.kv_fetch_wall_s, kv_store_wall_s=self.kv_store_wall_s,
            kv_fetch_wall_s=self.kv_fetch_wall_s, queue_modeled_s=self.queue_modeled_s + self.decode_wait_modeled_s,
            ttft_modeled_s=ttft_m, tpot_modeled_s=tpot_m, e2e_modeled_s=e2e_m,
            kv_transfer_modeled_s=self.kv_transfer_modeled_s, frontend_modeled_s=self.frontend_modeled_s)

    def usage(self) -> common_pb2.Usage:
        return total_usage([self])


def total_usage(samples: list[RequestState]) -> common_pb2.Usage:
    """One request's usage over its samples: the prompt (prefilled once) counted once, every sample's tokens."""
    first = samples[0]
    completion = sum(s.completion_tokens for s in samples)
    return common_pb2.Usage(prompt_tokens=first.prompt_len, completion_tokens=completion,
                            cached_prompt_tokens=first.cached_tokens, total_tokens=first.prompt_len + completion)
