"""``pdserve bench kv --handoff``: the KV hand-off inside the stack: stored per chunk, prefetched, over shared memory.

Each mode starts its own stack (router, prefill, kvstore, decode) with prompts prefilled in chunks of
``--chunk-tokens``, then sends the same distinct random prompts one at a time (no queueing, no prefix reuse) and
reads, per request: TTFT at the client, the gap from the first token to the second at the client (prefill's end to
decode's first token: the router's hand-over, decode's KV fetch and one decode step), and the two hand-off
figures the stack reports (prefill's KV store time left after its last chunk, decode's KV fetch time). Their sum,
store plus gap, is the time from the end of prefill's compute to the second token. Each mode runs once per KV dtype
(``--kv-dtypes``): a 16-bit cache moves half the bytes.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from pdserve.client.client import PdserveClient
from pdserve.launcher.stack import Stack, StackSpec
from pdserve.workload.report import fixed_width


@dataclass(frozen=True)
class HandoffMode:
    extra: dict[str, list[str]]  # service -> flags
    kv_shm: bool  # the blocks through shared memory (pdserve up's default) or the kvstore's socket


MODES: dict[str, HandoffMode] = {
    # each chunk's blocks stored as it finishes, on the socket; decode still fetches after prefill returned
    "store per chunk": HandoffMode({"router": ["--no-decode-prefetch"]}, kv_shm=False),
    # and a decode worker imports the blocks as they land (Decode.Prefetch)
    "+ prefetch": HandoffMode({}, kv_shm=False),
    # and the blocks through shared memory: pdserve up's default stack
    "+ prefetch + shm": HandoffMode({}, kv_shm=True),
}


@dataclass
class HandoffRow:
    mode: str
    kv_dtype: str
    requests: int
    ttft_ms: float  # means over the requests
    first_gap_ms: float  # first token to second token, at the client
    kv_store_ms: float  # prefill's store time after its last chunk (inside TTFT)
    kv_fetch_ms: float  # decode's fetch (inside the first gap)

    @property
    def prefill_end_to_second_ms(self) -> float:
        """From the end of prefill's last step to the second token: the store left after it, then the first gap."""
        return self.kv_store_ms + self.first_gap_ms


def _one(client: PdserveClient, prompt: list[int], output_len: int) -> tuple[float, float, float, float]:
    start = time.perf_counter()
    arrivals, last = [], None
    for chunk in client.generate(token_ids=prompt, max_tokens=output_len, temperature=0.0, ignore_eos=True):
        if chunk.token_ids:
            arrivals.append(time.perf_counter())
        last = chunk
    t = last.timings
    return (arrivals[0] - start, arrivals[1] - arrivals[0], t.kv_store_wall_s, t.kv_fetch_wall_s)


def run_handoff_bench(model: str | None, prompt_len: int, requests: int, chunk_tokens: int,
                      modes: list[str], output_len: int = 4, seed: int = 0,
                      kv_dtypes: tuple[str, ...] = ("float32",)) -> list[HandoffRow]:
    rows = []
    for mode in modes:
        for kv_dtype in kv_dtypes:
            rng = np.random.default_rng(seed)  # the same prompts for every mode and dtype
            extra = {name: list(flags) for name, flags in MODES[mode].extra.items()}
            extra.setdefault("prefill", []).extend(["--max-num-batched-tokens", str(chunk_tokens)])
            with (Stack(StackSpec(model=model, extra=extra, kv_dtype=kv_dtype, kv_shm=MODES[mode].kv_shm)) as stack,
                  PdserveClient(stack.router_target) as client):
                vocab = stack_vocab(model)
                prompts = [rng.integers(3, vocab, prompt_len).tolist() for _ in range(requests + 1)]
                _one(client, prompts[0], output_len)  # warm-up: connections, first allocations
                got = [_one(client, p, output_len) for p in prompts[1:]]
            means = [statistics.fmean(x) * 1e3 for x in zip(*got)]
            rows.append(HandoffRow(mode, kv_dtype, requests, *means))
    return rows


def stack_vocab(model: str | None) -> int:
    from pdserve.engine.gguf_file import read_metadata
    from pdserve.engine.model.default_model import resolve_model_path

    return read_metadata(resolve_model_path(model))[1].vocab_size


def format_handoff(rows: list[HandoffRow], prompt_len: int, chunk_tokens: int) -> str:
    columns = [("mode", "<16"), ("kv", "<8"), ("requests", ">8"), ("TTFT", ">8.1f"), ("kv store", ">9.1f"),
               ("1st->2nd token", ">15.1f"), ("kv fetch", ">9.1f"), ("prefill end->2nd token", ">23.1f")]
    table = fixed_width(columns, [(r.mode, r.kv_dtype, r.requests, r.ttft_ms, r.kv_store_ms, r.first_gap_ms,
                                   r.kv_fetch_ms, r.prefill_end_to_second_ms) for r in rows])
    return "\n".join([f"KV hand-off in the stack: {prompt_len}-token prompts prefilled in chunks of {chunk_tokens} "
                      "tokens, one request at a time, means in ms", *table])
