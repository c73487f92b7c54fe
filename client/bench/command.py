"""``pdserve bench``: from the flags to a result block (one run, a sweep, or a comparison)."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import math
import os
import sys
from collections.abc import Awaitable, Callable

from pdserve.client.bench import datasets as ds
from pdserve.client.bench.backends import BenchError, GrpcBackend, OpenAIBackend, Sampling, ServedModel
from pdserve.client.bench.metrics import parse_goodput, parse_percentiles, summarize
from pdserve.client.bench.report import format_result, result_json, save_json
from pdserve.client.bench.runner import LoadSpec, RunResult, run

DEFAULT_OUTPUT_LEN = 128
DEFAULT_RANDOM_PROMPTS = 100


def load_spec(a: argparse.Namespace, **overrides) -> LoadSpec:
    ignore_eos = a.ignore_eos or a.dataset in ("random", "trace")
    fields = dict(request_rate=a.request_rate, burstiness=a.burstiness, max_concurrency=a.max_concurrency,
                  duration_s=a.duration, warmup=a.warmup, seed=a.seed, progress=not a.disable_tqdm,
                  sampling=Sampling(temperature=a.temperature, ignore_eos=ignore_eos))
    return LoadSpec(**dict(fields, **overrides))


def _token_counter(a: argparse.Namespace):
    """Counts reply tokens for ShareGPT: the GGUF tokenizer when one is at hand, else about 4 characters a token."""
    try:
        from pdserve.engine.runtime import model_metadata

        tokenizer = model_metadata(a.tokenizer or a.model)[0]
        return lambda text: len(tokenizer.encode(text, add_bos=False))
    except (FileNotFoundError, ValueError):
        if a.tokenizer:
            raise
        return lambda text: max(1, len(text) // 4)


def build_requests(a: argparse.Namespace, served: ServedModel, seed_offset: int = 0) -> list[ds.BenchRequest]:
    """The dataset the flags describe, sized to --num-prompts (reproducible with --seed)."""
    out_range = ds.parse_range(a.output_len, "--output-len") if a.output_len else None
    fixed_out = out_range[0] if out_range and out_range[0] == out_range[1] else None
    vocab = a.vocab_size or served.vocab_size
    if a.dataset in ("random", "trace") and not vocab:
        raise ValueError(f"--dataset {a.dataset} needs --vocab-size with --base-url (the endpoint does not say)")
    if a.dataset in ("jsonl", "sharegpt", "trace") and not a.dataset_path:
        raise ValueError(f"--dataset {a.dataset} needs --dataset-path")
    if a.num_prompts is not None and a.num_prompts < 1:
        raise ValueError(f"--num-prompts must be at least 1, got {a.num_prompts}")
    if a.dataset == "random":
        n = a.num_prompts or DEFAULT_RANDOM_PROMPTS
        return ds.random_requests(n, vocab, ds.parse_range(a.input_len, "--input-len"),
                                  out_range or (DEFAULT_OUTPUT_LEN, DEFAULT_OUTPUT_LEN), a.random_prefix_fraction,
                                  a.seed + seed_offset)
    if a.dataset == "trace":
        if a.trace_block_tokens < 1:
            raise ValueError(f"--trace-block-tokens must be at least 1, got {a.trace_block_tokens}")
        rows = ds.trace_requests(a.dataset_path, vocab, a.trace_block_tokens, a.trace_time_scale, fixed_out)
        return rows[:a.num_prompts] if a.num_prompts else rows
    if a.dataset == "sharegpt":
        rows = ds.sharegpt_requests(a.dataset_path, fixed_out, _token_counter(a))
    elif a.dataset == "builtin":
        rows = ds.builtin_requests(fixed_out or DEFAULT_OUTPUT_LEN)
    else:
        rows = ds.prompt_file_requests(a.dataset_path, fixed_out or DEFAULT_OUTPUT_LEN)
    return ds.cycle_to(rows, a.num_prompts or len(rows), a.seed)


def make_backend(a: argparse.Namespace):
    if a.target and a.base_url:
        raise ValueError("give --target (the router, gRPC) or --base-url (OpenAI HTTP), not both")
    if a.base_url:
        return OpenAIBackend(a.base_url, a.served_model_name, a.request_timeout, a.api_key)
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


def run_grpc(target: str, requests: list[ds.BenchRequest], spec: LoadSpec, on_start=None) -> RunResult:
    """One run against a router, from synchronous code (the benchmarks that start their own stacks)."""
    return asyncio.run(with_backend(lambda: GrpcBackend(target), lambda b, _: run(b, requests, spec, on_start)))


def run_config(a: argparse.Namespace, backend_name: str, served: ServedModel, spec: LoadSpec, n: int) -> dict:
    """The configuration part of the JSON, under vLLM's names."""
    return {"backend": backend_name, "model_id": served.name, "dataset": a.dataset, "num_prompts": n,
            "request_rate": spec.request_rate if not math.isinf(spec.request_rate) else "inf",
            "burstiness": spec.burstiness, "max_concurrency": spec.max_concurrency, "seed": spec.seed,
            "target": a.base_url or a.target or os.environ.get("PDSERVE_ROUTER", "127.0.0.1:50050")}


def default_result_path(backend_name: str) -> str:
    return f"bench-{backend_name}-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"


def cmd_bench(a: argparse.Namespace) -> int:
    percentiles = parse_percentiles(a.metric_percentiles)
    slo = parse_goodput(a.goodput)
    if a.compare:
        from pdserve.client.bench.compare import run_compare

        return run_compare(a, percentiles, slo)
    if a.sweep:
        from pdserve.client.bench.sweep import run_sweep

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
