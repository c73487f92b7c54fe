"""Sends a workload: warm-up first (not counted), then each request at its arrival offset, at most
``max_concurrency`` in flight, until the requests run out or ``duration_s`` has passed; a progress bar meanwhile."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time

from tqdm import tqdm

from pdserve.bench.serve.backends import BenchError
from pdserve.workload.arrivals import schedule
from pdserve.workload.datasets import BenchRequest
from pdserve.workload.record import LoadSpec, RequestRecord, RunResult


def warmup_request(request: BenchRequest) -> BenchRequest:
    """A request of the same shape whose prompt shares no prefix with the workload (so it warms no cache)."""
    out = min(request.output_len, 16)
    if request.token_ids is not None:
        return BenchRequest(output_len=out, token_ids=request.token_ids[::-1])
    if request.messages is not None:
        return BenchRequest(output_len=out, messages=[{"role": "user", "content": "(warm-up) " + request.messages[-1]
                                                       ["content"]}])
    return BenchRequest(output_len=out, prompt="(warm-up) " + request.prompt)


async def run(backend, requests: list[BenchRequest], spec: LoadSpec, on_start=None) -> RunResult:
    """``on_start()`` (optional) is called after the warm-up, when the measured run begins."""
    if not requests:
        raise BenchError("the dataset gave no requests")
    if spec.warmup:
        warm = [RequestRecord(i) for i in range(spec.warmup)]
        await asyncio.gather(*(backend.send(warmup_request(requests[i % len(requests)]), r, spec.sampling)
                               for i, r in enumerate(warm)))
        failed = [r for r in warm if not r.ok]
        if len(failed) == len(warm):
            raise BenchError(f"every warm-up request failed: {failed[0].error_code}: {failed[0].error}")

    if on_start is not None:
        await asyncio.to_thread(on_start)
    source = itertools.cycle(requests) if spec.duration_s else iter(requests)
    offsets = schedule(requests, spec.request_rate, spec.burstiness, spec.seed)
    gate = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None
    bar = tqdm(total=None if spec.duration_s else len(requests), disable=not spec.progress, file=sys.stderr,
               unit="req", dynamic_ncols=True)
    records: list[RequestRecord] = []
    tasks = []

    async def one(request: BenchRequest, record: RequestRecord) -> None:
        try:
            await backend.send(request, record, spec.sampling)
        finally:
            if gate:
                gate.release()
            bar.update(1)

    start = time.perf_counter()
    for index, (request, offset) in enumerate(zip(source, offsets)):
        if spec.duration_s and offset >= spec.duration_s:
            break
        while (delay := start + offset - time.perf_counter()) > 0:  # a timer may fire a hair early
            await asyncio.sleep(delay)
        if gate:
            await gate.acquire()
        now = time.perf_counter() - start
        if gate and spec.duration_s and now >= spec.duration_s:  # waited past the end for a slot
            gate.release()
            break
        record = RequestRecord(index, scheduled_s=offset, start_s=now)
        records.append(record)
        tasks.append(asyncio.create_task(one(request, record)))
    await asyncio.gather(*tasks)
    duration = time.perf_counter() - start
    bar.close()
    return RunResult(records, duration, spec)
