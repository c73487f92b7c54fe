"""``pdserve bench serve``: from the flags to a result block (one run, a sweep, or a comparison)."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from collections.abc import Awaitable, Callable

from pdserve.bench.serve.backends import BenchError, GrpcBackend, OpenAIBackend
from pdserve.bench.serve.runner import run
from pdserve.workload import datasets as ds
from pdserve.workload.record import LoadSpec, RunResult, Sampling
from pdserve.workload.report import default_result_path, format_result, result_json, save_json
from pdserve.workload.requests import ServedModel, build_requests
from pdserve.workload.stats import parse_goodput, parse_percentiles, summarize


def load_spec(a: argparse.Namespace, **overrides) -> LoadSpec:
    ignore_eos = a.ignore_eos or a.dataset in ("random", "trace")
    fields = dict(request_rate=a.request_rate, burstiness=a.burstiness, max_concurrency=a.max_concurrency,
                  duration_s=a.duration, warmup=a.warmup, seed=a.seed, progress=not a.disable_tqdm,
                  sampling=Sampling(temperature=a.temperature, ignore_eos=ignore_eos))
    return LoadSpec(**dict(fields, **overrides))


def make_backend(a: argparse.Namespace):
    if a.target and a.base_url:
        raise ValueError("give --target (the router, gRPC) or --base-url (OpenAI HTTP), not both")
    if a.base_url:
        return OpenAIBackend(a.base_url, a.served_model_name, a.request_timeout, a.api_key, a.endpoint)
    target = a.target or os.environ.get("PDSERVE_ROUTER", "127.0.0.1:50050")
    if ":" not in target:
        raise ValueError(f"--target must be HOST:PORT, got {target!r}")
    return GrpcBackend(target, a.request_timeout)


async def with_backend(factory: Callable[[], object],
                       body: Callable[[object, ServedModel], Awaitable]):
    """Create a backend inside the running loop (gRPC channels belong to one), check it answers, run, close."""
    backend = factory()
    try:
        return await body(backend, await backend.check())
    finally:
        await backend.close()


def run_workload(factory: Callable[[], object], requests: list[ds.BenchRequest], spec: LoadSpec,
                 on_start=None) -> RunResult:
    """One run against the backend ``factory`` makes, from synchronous code (the benchmarks that start what they
    load: stacks, the in-process engine, llama.cpp's server)."""
    return asyncio.run(with_backend(factory, lambda b, _: run(b, requests, spec, on_start)))


def run_grpc(target: str, requests: list[ds.BenchRequest], spec: LoadSpec, on_start=None) -> RunResult:
    """One run against a router."""
    return run_workload(lambda: GrpcBackend(target), requests, spec, on_start)


def run_config(a: argparse.Namespace, backend_name: str, served: ServedModel, spec: LoadSpec, n: int) -> dict:
    """The configuration part of the JSON, under vLLM's names."""
    return {"backend": backend_name, "model_id": served.name, "dataset": a.dataset, "num_prompts": n,
            "request_rate": spec.request_rate if not math.isinf(spec.request_rate) else "inf",
            "burstiness": spec.burstiness, "max_concurrency": spec.max_concurrency, "seed": spec.seed,
            "target": a.base_url or a.target or os.environ.get("PDSERVE_ROUTER", "127.0.0.1:50050")}


def main(a: argparse.Namespace) -> int:
    percentiles = parse_percentiles(a.metric_percentiles)
    slo = parse_goodput(a.goodput)
    if a.compare:
        from pdserve.bench.serve.compare import run_compare

        return run_compare(a, percentiles, slo)
    if a.sweep:
        from pdserve.bench.serve.sweep import run_sweep

        return run_sweep(a, percentiles, slo)
    load_spec(a)  # flag errors before connecting

    async def body(backend, served: ServedModel) -> tuple[RunResult, dict]:
        requests = build_requests(a, served)
        spec = load_spec(a)
        result = await run(backend, requests, spec)
        return result, run_config(a, backend.name, served, spec, len(result.records))

    result, config = asyncio.run(with_backend(lambda: make_backend(a), body))
    summary = summarize(result, percentiles, slo)
    print(format_result(summary, percentiles=percentiles), flush=True)
    if a.save_result is not None:
        path = a.save_result or default_result_path(config["backend"])
        save_json(path, result_json(summary, config, result))
        print(f"result written to {path}", file=sys.stderr)
    if summary["completed"] == 0:
        raise BenchError(f"no request succeeded: {summary['errors_by_status'][0]['status']}: "
                         f"{summary['errors_by_status'][0]['message']}")
    return 0
