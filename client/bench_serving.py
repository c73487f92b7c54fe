"""One workload, three ways of serving it, measured in one run: the in-process engine, the disaggregated stack
(router -> prefill -> kvstore -> decode, separate processes) and colocated mode (one decode worker prefills locally).

Every request has a random prompt (distinct, so no prefix is reused) and ignores EOS, so each mode generates exactly
the same number of tokens and output tokens/s compares like with like.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from client.launcher import Stack, StackSpec
from client.loadgen import format_summary, run_load, summarize
from engine.llm_engine import LLMEngine
from engine.params import SamplingParams
from engine.runtime import Runtime, model_metadata

MODES = ("in_process", "disaggregated", "colocated")


def make_prompts(vocab: int, n: int, prompt_len: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, prompt_len).tolist() for _ in range(n)]


def run_in_process(model: str | None, prompts: list[list[int]], output_len: int, concurrency: int) -> dict:
    runtime = Runtime.load(model)
    engine = LLMEngine(runtime, max_num_seqs=concurrency)
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()
    seqs = engine.generate(prompts, params)
    duration = time.perf_counter() - start
    tokens = sum(len(s.output_ids) for s in seqs)
    return {"duration_s": duration, "total_output_tokens": tokens, "output_tokens_per_s": tokens / duration}


def run_stack(spec: StackSpec, prompts: list[list[int]], output_len: int, concurrency: int) -> dict:
    requests = [dict(token_ids=p, max_tokens=output_len, temperature=0.0, ignore_eos=True) for p in prompts]
    # warm-up (connections, first steps) with other prompts, so no prefix of the workload is cached
    warmup = [dict(r, token_ids=[3] * len(r["token_ids"])) for r in requests[:2]]
    with Stack(spec) as stack:
        asyncio.run(run_load(stack.router_target, warmup, concurrency))
        results, duration = asyncio.run(run_load(stack.router_target, requests, concurrency))
    summary = summarize(results, duration)
    ok = [r for r in results if r.ok]
    ttft = sum(r.ttft_s for r in ok)
    summary["kv_store_share_of_ttft"] = sum(r.server.get("kv_store_wall_s", 0.0) for r in ok) / ttft if ttft else 0.0
    summary["kv_fetch_mean_s"] = float(np.mean([r.server.get("kv_fetch_wall_s", 0.0) for r in ok])) if ok else 0.0
    summary["ttft_mean_s"] = ttft / len(ok) if ok else 0.0
    return summary


def compare(model: str | None, n: int = 64, prompt_len: int = 256, output_len: int = 64, concurrency: int = 16,
            modes: tuple[str, ...] = MODES, verbose: bool = True) -> dict[str, dict]:
    vocab = model_metadata(model)[1].vocab_size
    prompts = make_prompts(vocab, n, prompt_len)
    out: dict[str, dict] = {}
    for mode in modes:
        if mode == "in_process":
            out[mode] = run_in_process(model, prompts, output_len, concurrency)
        else:
            spec = StackSpec(model=model, colocated=(mode == "colocated"))
            out[mode] = run_stack(spec, prompts, output_len, concurrency)
            if verbose:
                print(format_summary(mode, out[mode]))
        if verbose:
            print(f"{mode}: {out[mode]['output_tokens_per_s']:.1f} output tok/s", flush=True)
    return out


def format_comparison(results: dict[str, dict], n: int, prompt_len: int, output_len: int, concurrency: int) -> str:
    base = results.get("in_process", {}).get("output_tokens_per_s")
    lines = [f"workload: {n} requests, {prompt_len}-token prompts, {output_len} output tokens, concurrency "
             f"{concurrency}",
             f"{'mode':<15} {'output tok/s':>13} {'vs in-process':>14} {'duration s':>11}"]
    for mode, r in results.items():
        ratio = f"{r['output_tokens_per_s'] / base:.2f}" if base else "-"
        lines.append(f"{mode:<15} {r['output_tokens_per_s']:>13.1f} {ratio:>14} {r['duration_s']:>11.1f}")
    if "disaggregated" in results:
        d = results["disaggregated"]
        lines.append(f"disaggregated: KV store (prefill -> kvstore) is {d['kv_store_share_of_ttft'] * 100:.1f}% of "
                     f"mean TTFT ({d['ttft_mean_s'] * 1000:.0f} ms); decode's KV fetch averages "
                     f"{d['kv_fetch_mean_s'] * 1000:.1f} ms before the second token")
    return "\n".join(lines)
