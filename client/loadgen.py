"""Load generation against the router, in the manner of vLLM's benchmark_serving.

Arrivals are all at once (rate = inf) or Poisson / gamma with a burstiness factor; a semaphore caps concurrency.
Per request: TTFT, every inter-token latency (ITL, one per chunk gap), TPOT = (e2e - ttft) / (n - 1), e2e, and the
router's own timings in both clocks. Goodput counts requests that met every SLO given.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import asdict, dataclass, field

import grpc
import numpy as np

from client.client import AsyncPdserveClient


@dataclass
class RequestResult:
    ok: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    finish_reason: str = ""
    error: str = ""
    server: dict = field(default_factory=dict)  # the router's Timings, both clocks

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1) if self.completion_tokens > 1 else 0.0


def arrival_gaps(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seconds before each request: 0 for rate = inf, else gamma(shape=burstiness) with mean 1/rate (1 = Poisson)."""
    if math.isinf(rate):
        return [0.0] * n
    rng = np.random.default_rng(seed)
    return rng.gamma(burstiness, 1.0 / (rate * burstiness), n).tolist()


async def _one(client: AsyncPdserveClient, request: dict, sem: asyncio.Semaphore) -> RequestResult:
    async with sem:
        start = time.perf_counter()
        last = start
        result = RequestResult(ok=False)
        try:
            async for chunk in client.generate(**request):
                now = time.perf_counter()
                if chunk.token_ids:
                    if result.completion_tokens == 0:
                        result.ttft_s = now - start
                    else:
                        result.itl_s.append(now - last)
                    last = now
                    result.completion_tokens += len(chunk.token_ids)
                if chunk.finish_reason:
                    result.finish_reason = chunk.finish_reason
                    result.prompt_tokens = chunk.usage.prompt_tokens
                    result.cached_tokens = chunk.usage.cached_prompt_tokens
                    t = chunk.timings
                    result.server = {f.name: getattr(t, f.name) for f in t.DESCRIPTOR.fields}
            result.e2e_s = time.perf_counter() - start
            result.ok = True
        except grpc.aio.AioRpcError as err:
            result.error = f"{err.code().name}: {err.details()}"
        return result


async def run_load(target: str, requests: list[dict], concurrency: int, rate: float = math.inf,
                   burstiness: float = 1.0) -> tuple[list[RequestResult], float]:
    """Send ``requests`` (keyword dicts for AsyncPdserveClient.generate); returns results and the makespan."""
    sem = asyncio.Semaphore(concurrency)
    gaps = arrival_gaps(len(requests), rate, burstiness)
    async with AsyncPdserveClient(target) as client:
        start = time.perf_counter()
        tasks = []
        for request, gap in zip(requests, gaps):
            if gap:
                await asyncio.sleep(gap)
            tasks.append(asyncio.create_task(_one(client, request, sem)))
        results = await asyncio.gather(*tasks)
        return list(results), time.perf_counter() - start


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "median": 0.0, "p99": 0.0}
    a = np.asarray(values)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p99": float(np.percentile(a, 99))}


def summarize(results: list[RequestResult], duration_s: float, slo_ttft_s: float | None = None,
              slo_tpot_s: float | None = None) -> dict:
    ok = [r for r in results if r.ok]
    good = [r for r in ok if (slo_ttft_s is None or r.ttft_s <= slo_ttft_s)
            and (slo_tpot_s is None or r.tpot_s <= slo_tpot_s)]
    output = sum(r.completion_tokens for r in ok)
    return {
        "requests": len(results), "completed": len(ok), "failed": len(results) - len(ok),
        "duration_s": duration_s,
        "request_throughput": len(ok) / duration_s if duration_s else 0.0,
        "output_tokens_per_s": output / duration_s if duration_s else 0.0,
        "total_output_tokens": output,
        "total_prompt_tokens": sum(r.prompt_tokens for r in ok),
        "cached_prompt_tokens": sum(r.cached_tokens for r in ok),
        "goodput": len(good) / duration_s if duration_s else 0.0,
        "ttft_s": _stats([r.ttft_s for r in ok]),
        "tpot_s": _stats([r.tpot_s for r in ok if r.completion_tokens > 1]),
        "itl_s": _stats([x for r in ok for x in r.itl_s]),
        "e2e_s": _stats([r.e2e_s for r in ok]),
        "errors": sorted({r.error for r in results if not r.ok})[:5],
    }


def format_summary(title: str, s: dict) -> str:
    w = 50
    lines = [f"{' ' + title + ' ':=^{w}}",
             f"{'Successful requests:':<34}{s['completed']:>16}",
             f"{'Failed requests:':<34}{s['failed']:>16}",
             f"{'Benchmark duration (s):':<34}{s['duration_s']:>16.2f}",
             f"{'Total prompt tokens:':<34}{s['total_prompt_tokens']:>16}",
             f"{'Cached prompt tokens:':<34}{s['cached_prompt_tokens']:>16}",
             f"{'Total generated tokens:':<34}{s['total_output_tokens']:>16}",
             f"{'Request throughput (req/s):':<34}{s['request_throughput']:>16.2f}",
             f"{'Output token throughput (tok/s):':<34}{s['output_tokens_per_s']:>16.2f}",
             f"{'Goodput (req/s):':<34}{s['goodput']:>16.2f}"]
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E")):
        lines.append(f"{'-' * 10} {label} (ms) {'-' * (w - 16 - len(label))}")
        for stat in ("mean", "median", "p99"):
            lines.append(f"{f'{stat.capitalize()} {label} (ms):':<34}{s[key][stat] * 1000:>16.2f}")
    lines.append("=" * w)
    return "\n".join(lines)


def write_json(path: str, payload: dict, results: list[RequestResult] | None = None) -> None:
    data = dict(payload)
    if results is not None:
        data["requests_detail"] = [asdict(r) for r in results]
    with open(path, "w") as fh:
        json.dump(data, fh, indent=2)
