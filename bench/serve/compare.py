"""``pdserve bench serve --compare``: one workload, several ways of serving it, one table.

- ``in_process``: the engine in this process (one process, every core);
- ``disaggregated``: router -> prefill -> kvstore -> decode, separate processes started here, the internal plane
  secured as ``pdserve up`` starts it (mutual TLS, per-RPC authorization, block MACs);
- ``disaggregated_static``: the same with each worker kept to its own share of the cores (``--static-cores``);
- ``disaggregated_socket``: the same with the KV blocks on the kvstore's TLS socket instead of shared memory
  (``--no-kv-shm``);
- ``disaggregated_insecure``: the same with ``--insecure-internal``, for what the security costs (the ratio line);
- ``colocated``: router and a decode worker that prefills itself (no kvstore);
- ``llama_server``: llama.cpp's own server on the same file and workload (bench/serve/llama_server.py), skipped with
  a message where no llama-server binary is to be had.

Random prompts ignore EOS, so every mode generates the same tokens and output tokens/s compares like with like. For
the disaggregated stack the KV hand-off is set against what it rides on: the kvstore write per request (the router's
``kv_store_wall_s``) against the prefill compute per request (the prefill workers' ``pdserve_step_wall_seconds`` for
the run, divided by the requests), not against a TTFT that queueing dominates; and decode's fetch of the blocks
(``kv_fetch_wall_s``, before the second token).

Each mode's CPU seconds in the run are given by process, beside the in-process engine's (its own process, the load
generator included): on a host whose cores the model keeps busy, what the stack spends beside the model's work (the KV
hand-off's copies in three processes, RPCs, more and smaller decode steps) comes out of the model's time, and these
lines say how much and where.
"""

from __future__ import annotations

import argparse
import math
import shlex
import time
from pathlib import Path

import numpy as np

from pdserve.bench.kv.throughput import process_cpu_s
from pdserve.bench.serve.backends import BenchError, InProcessBackend
from pdserve.bench.serve.command import load_spec, run_config, run_grpc, run_workload
from pdserve.bench.serve.llama_server import resolve_llama_server, run_llama_server_mode
from pdserve.common.scrape import total
from pdserve.workload.record import LoadSpec
from pdserve.workload.report import default_result_path, format_result, result_json, save_json
from pdserve.workload.requests import ServedModel, build_requests
from pdserve.workload.stats import summarize

MODES = ("in_process", "disaggregated", "disaggregated_static", "disaggregated_socket", "disaggregated_insecure",
         "colocated", "llama_server")


def worker_counters(stack, prefilling, decoding) -> tuple[float, float]:
    """(summed wall seconds of the ``prefilling`` workers' prefill steps, the ``decoding`` workers' steps that decoded:
    decode steps, and mixed steps of prompt chunks and decodes) so far; each worker's metrics read once, also a
    colocated worker that is in both."""
    pages = {}
    for p in [*prefilling, *decoding]:
        if p.name not in pages:
            pages[p.name] = stack.scrape(p)
    prefill_s = sum(total(pages[p.name], "pdserve_step_wall_seconds_sum", phase="prefill") for p in prefilling)
    steps = sum(total(pages[p.name], "pdserve_step_wall_seconds_count", phase=phase)
                for p in decoding for phase in ("decode", "mixed"))
    return prefill_s, steps


def stack_cpu_seconds(stack) -> dict[str, float]:
    """CPU seconds each process of the stack has used so far, by name: steadier than wall time on a shared machine."""
    return {p.name: process_cpu_s(p.popen.pid) for p in stack.processes}


def run_stack_mode(model: str | None, colocated: bool, requests, spec: LoadSpec, kv_shm: bool = True,
                   extra: dict[str, list[str]] | None = None, insecure_internal: bool = False,
                   share_cores: bool = True):
    """Start the stack, run the workload after the warm-up, return (result, prefill step seconds of the run, CPU
    seconds of each of the stack's processes in the run, decode steps in the run)."""
    from pdserve.launcher.stack import Stack, StackSpec

    with Stack(StackSpec(model=model, colocated=colocated, metrics=True, kv_shm=kv_shm, extra=extra or {},
                         insecure_internal=insecure_internal, share_cores=share_cores)) as stack:
        workers = stack.decodes if colocated else stack.prefills

        def sample() -> tuple[float, dict[str, float], float]:
            prefill_s, steps = worker_counters(stack, workers, stack.decodes)
            return prefill_s, stack_cpu_seconds(stack), steps
        before: list[tuple[float, dict[str, float], float]] = []
        result = run_grpc(stack.router_target, requests, spec, on_start=lambda: before.append(sample()))
        after = sample()
    if not before:
        return result, None, None, None
    (prefill_before, cpu_before, steps_before), (prefill_after, cpu_after, steps_after) = before[0], after
    return (result, prefill_after - prefill_before, {name: cpu_after[name] - cpu_before[name] for name in cpu_after},
            steps_after - steps_before)


def run_in_process(model: str | None, requests, spec: LoadSpec):
    """The workload on the engine in this process, after the warm-up; returns (result, this process's CPU seconds in
    the run, the load generator's included)."""
    started: list[float] = []
    result = run_workload(lambda: InProcessBackend(model, spec.max_concurrency or 64), requests, spec,
                          on_start=lambda: started.append(time.process_time()))
    return result, {"this process": time.process_time() - started[0]} if started else None


def handoff(summary: dict, result, prefill_s: float | None) -> dict:
    ok = [r for r in result.records if r.ok]
    fetch = [r.server.get("kv_fetch_wall_s", 0.0) * 1000 for r in ok]
    out = {"mean_kv_store_ms": float(np.mean([r.server.get("kv_store_wall_s", 0.0) for r in ok])) * 1000 if ok else 0.0,
           "mean_kv_fetch_ms": float(np.mean(fetch)) if ok else 0.0,
           "p99_kv_fetch_ms": float(np.percentile(fetch, 99)) if ok else 0.0,
           "prefill_compute_s": prefill_s,
           "prefill_compute_per_request_ms": prefill_s / len(ok) * 1000 if prefill_s is not None and ok else None}
    return out


def kv_write_share(d: dict) -> float | None:
    """The kvstore write per request as a percentage of the prefill compute per request; None where the workers'
    metrics did not give the compute."""
    per_request = d["prefill_compute_per_request_ms"]
    return d["mean_kv_store_ms"] / per_request * 100 if per_request else None


def describe_workload(a: argparse.Namespace, n: int, spec: LoadSpec) -> str:
    shape = (f"{a.input_len}-token prompts, {a.output_len or 128} output tokens" if a.dataset == "random"
             else f"dataset {a.dataset}")
    rate = "all at once" if math.isinf(spec.request_rate) else f"{spec.request_rate:g} req/s"
    cap = f", max concurrency {spec.max_concurrency}" if spec.max_concurrency else ""
    return f"workload: {n} requests, {shape}, {rate}{cap}"


def format_comparison(workload: str, points: dict[str, dict]) -> str:
    base = points.get("in_process", {}).get("summary", {}).get("output_throughput")
    w = max([14, *(len(mode) for mode in points)])
    lines = [workload,
             f"{'mode':<{w}} {'ok':>4} {'out tok/s':>10} {'vs in-proc':>10} {'mean TTFT':>10} {'mean TPOT':>10} "
             f"{'p99 E2EL':>9} {'duration':>9}",
             f"{'':<{w}} {'':>4} {'':>10} {'':>10} {'ms':>10} {'ms':>10} {'ms':>9} {'s':>9}"]
    for mode, p in points.items():
        s = p["summary"]
        ratio = f"{s['output_throughput'] / base:.2f}" if base else "-"
        lines.append(f"{mode:<{w}} {s['completed']:>4} {s['output_throughput']:>10.1f} {ratio:>10} "
                     f"{s['mean_ttft_ms']:>10.1f} {s['mean_tpot_ms']:>10.2f} {s['p99_e2el_ms']:>9.1f} "
                     f"{s['duration']:>9.1f}")
    for mode, p in points.items():
        if "handoff" in p:
            lines.extend(handoff_lines(mode, p["handoff"]))
    lines.extend(cpu_lines(points))
    if "disaggregated" in points and "disaggregated_insecure" in points:
        lines.append(security_cost(points["disaggregated"]["summary"], points["disaggregated_insecure"]["summary"]))
    return "\n".join(lines)


def handoff_lines(mode: str, d: dict) -> list[str]:
    share = kv_write_share(d)
    if share is not None:
        write = (f"{mode} KV hand-off per request: kvstore write {d['mean_kv_store_ms']:.1f} ms = {share:.1f}% of "
                 f"prefill compute ({d['prefill_compute_per_request_ms']:.1f} ms: {d['prefill_compute_s']:.2f} s of "
                 f"prefill steps / requests)")
    else:
        write = (f"{mode} KV hand-off per request: kvstore write {d['mean_kv_store_ms']:.1f} ms (prefill compute not "
                 f"exposed by the workers' metrics)")
    return [write, f"{mode}: decode's KV fetch before the second token: {d['mean_kv_fetch_ms']:.1f} ms mean, "
                   f"{d['p99_kv_fetch_ms']:.1f} ms p99"]


def cpu_lines(points: dict[str, dict]) -> list[str]:
    """Each mode's CPU seconds in the run by process, and against the in-process engine's for the same work."""
    base = points.get("in_process", {}).get("summary", {}).get("cpu_s")
    lines = []
    for mode, p in points.items():
        by_process = p["summary"].get("cpu_s_by_process")
        if not by_process:
            continue
        cpu = p["summary"]["cpu_s"]
        ratio = f" = {cpu / base:.2f} x in-process's" if base and mode != "in_process" else ""
        parts = " + ".join(f"{name} {s:.2f}" for name, s in sorted(by_process.items(), key=lambda kv: -kv[1]))
        steps = p["summary"].get("decode_steps")
        # every token but each request's first, which prefill samples (a colocated worker's may come in a mixed step)
        decoded = p["summary"].get("total_output_tokens", 0) - p["summary"].get("completed", 0)
        per_step = f"; decode steps {steps:.0f}, {decoded / steps:.1f} tokens a step" if steps else ""
        lines.append(f"{mode} CPU in the run: {cpu:.2f} s{ratio} ({parts}){per_step}")
    return lines


def security_cost(secured: dict, insecure: dict) -> str:
    """The secured plane against the insecure one, as ratios of the same run's figures: wall clock, and the stack's
    CPU seconds per output token (which other work on a shared machine moves far less)."""
    def ratio(key: str) -> str:
        return f"{secured[key] / insecure[key]:.3f}" if insecure.get(key) else "-"
    return (f"secured / insecure internal plane: out tok/s {ratio('output_throughput')}, mean TTFT "
            f"{ratio('mean_ttft_ms')}, mean TPOT {ratio('mean_tpot_ms')}, p99 E2EL {ratio('p99_e2el_ms')}; stack CPU "
            f"per output token {ratio('stack_cpu_ms_per_token')} ({secured.get('stack_cpu_ms_per_token', 0):.1f} against "
            f"{insecure.get('stack_cpu_ms_per_token', 0):.1f} ms)")


def run_mode(a: argparse.Namespace, mode: str, requests, spec: LoadSpec, percentiles: tuple[float, ...],
             slo: dict[str, float], served: ServedModel, llama_server: Path | str | None = None) -> dict | None:
    """One mode's run of the workload: its summary, result and configuration; None when the mode is skipped
    (``llama_server``: the binary of that mode, or why there is none)."""
    prefill_s = cpu_s = steps = None
    if mode == "in_process":
        result, cpu_s = run_in_process(a.model, requests, spec)
        backend_name = InProcessBackend.name
    elif mode == "llama_server":
        if not isinstance(llama_server, Path):
            print(f"{mode}: skipped: {llama_server}", flush=True)
            return None
        result = run_llama_server_mode(llama_server, a.model, requests, spec)
        backend_name = "llama.cpp-server"
    else:
        extra = {"prefill": shlex.split(a.prefill_flags), "decode": shlex.split(a.decode_flags)}
        kv_shm = a.kv_shm and mode != "disaggregated_socket"
        result, prefill_s, cpu_s, steps = run_stack_mode(
            a.model, mode == "colocated", requests, spec, kv_shm, extra,
            insecure_internal=mode == "disaggregated_insecure", share_cores=mode != "disaggregated_static")
        backend_name = f"pdserve-{mode}"
    summary = summarize(result, percentiles, slo)
    if cpu_s is not None:
        summary["cpu_s_by_process"] = cpu_s
        summary["cpu_s"] = sum(cpu_s.values())
        if steps is not None:
            summary["decode_steps"] = steps
        if mode != "in_process" and summary.get("total_output_tokens"):
            summary["stack_cpu_ms_per_token"] = summary["cpu_s"] / summary["total_output_tokens"] * 1000
    print(format_result(summary, f"{mode}", percentiles), flush=True)
    point = {"summary": summary, "result": result, "config": run_config(a, backend_name, served, spec,
                                                                         len(result.records))}
    if mode.startswith("disaggregated"):
        point["handoff"] = handoff(summary, result, prefill_s)
    if summary["completed"] == 0:
        e = summary["errors_by_status"][0]
        raise BenchError(f"{mode}: no request succeeded: {e['status']}: {e['message']}")
    return point


def format_rounds(rounds: list[dict[str, dict]]) -> str:
    """Each mode's output throughput and its ratio to the in-process engine's of the same round, as medians over the
    rounds with their range: the figure to quote on a shared machine, where one round's ratio moves by tens of
    percent."""
    modes = list(dict.fromkeys(mode for points in rounds for mode in points))
    lines = [f"medians over {len(rounds)} rounds (ratios taken within each round; the modes' order rotates by round)",
             f"{'mode':<22} {'out tok/s':>10} {'range':>13} {'vs in-proc':>10} {'range':>11}"]
    for mode in modes:
        tps = [p[mode]["summary"]["output_throughput"] for p in rounds if mode in p]
        ratios = [p[mode]["summary"]["output_throughput"] / p["in_process"]["summary"]["output_throughput"]
                  for p in rounds if mode in p and "in_process" in p]
        ratio = (f"{np.median(ratios):>10.2f} {min(ratios):>5.2f}-{max(ratios):<5.2f}" if ratios
                 else f"{'-':>10} {'':>11}")
        lines.append(f"{mode:<22} {np.median(tps):>10.1f} {min(tps):>6.1f}-{max(tps):<6.1f} {ratio}".rstrip())
    for mode in modes:
        shares = [share for p in rounds if "handoff" in p.get(mode, {})
                  for share in [kv_write_share(p[mode]["handoff"])] if share is not None]
        if shares:
            lines.append(f"{mode} kvstore write per request: median {np.median(shares):.1f}% of prefill compute "
                         f"({min(shares):.1f}-{max(shares):.1f}%)")
    for mode in modes:
        cpu = [(p[mode]["summary"]["cpu_s"], p.get("in_process", {}).get("summary", {}).get("cpu_s"))
               for p in rounds if p.get(mode, {}).get("summary", {}).get("cpu_s")]
        ratios = [own / base for own, base in cpu if base]
        if cpu and mode != "in_process":
            against = (f" = {np.median(ratios):.2f} x in-process's ({min(ratios):.2f}-{max(ratios):.2f})" if ratios
                       else "")
            lines.append(f"{mode} CPU in the run: median {np.median([own for own, _ in cpu]):.2f} s{against}")
    return "\n".join(lines)


def run_compare(a: argparse.Namespace, percentiles: tuple[float, ...], slo: dict[str, float]) -> int:
    from pdserve.engine.runtime import model_metadata

    if a.target or a.base_url:
        raise ValueError("--compare starts its own stacks: drop --target / --base-url")
    modes = [m for m in a.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"--modes: {','.join(unknown) or '(none)'} not among {','.join(MODES)}")
    if a.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {a.rounds}")
    _, config, name = model_metadata(a.model)
    served = ServedModel(name, config.vocab_size, config.context_length)
    requests = build_requests(a, served)
    spec = load_spec(a)
    workload = describe_workload(a, len(requests), spec)
    workload += "".join(f"; {role} flags: {flags}" for role, flags in (("prefill", a.prefill_flags),
                                                                       ("decode", a.decode_flags)) if flags)
    llama_server = resolve_llama_server(a) if "llama_server" in modes else None
    rounds: list[dict[str, dict]] = []
    for r in range(a.rounds):
        points: dict[str, dict] = {}
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # each round starts with the next mode
            print(f"--- {mode}" + (f", round {r + 1} of {a.rounds}" if a.rounds > 1 else "") + " ---", flush=True)
            point = run_mode(a, mode, requests, spec, percentiles, slo, served, llama_server)
            if point is not None:
                points[mode] = point
        points = {mode: points[mode] for mode in modes if mode in points}
        print(format_comparison(workload, points), flush=True)
        rounds.append(points)
    if a.rounds > 1:
        print(format_rounds(rounds))
    if a.save_result is not None:
        path = a.save_result or default_result_path("compare")
        saved = [{mode: dict(result_json(p["summary"], p["config"], p["result"]), **p.get("handoff", {}))
                  for mode, p in points.items()} for points in rounds]
        save_json(path, saved[0] if len(saved) == 1 else {"rounds": saved})
        print(f"result written to {path}")
    return 0
