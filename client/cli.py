"""The ``pdserve`` command line."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

import grpc

from pdserve.client.bench.args import add_bench_args
from pdserve.common.clock import KV_LINKS, PACE_MODES
from pdserve.perfmodel.deployment import KV_PRECISIONS
from pdserve.engine.bench import DEFAULT_BATCHES, DEFAULT_CONTEXTS, DEFAULT_PROMPT_LENS
from pdserve.engine.kv_budget import DEFAULT_KV_BLOCKS
from pdserve.engine.params import SamplingParams
from pdserve.client.launcher import DEFAULT_METRICS_BASE_PORT
from pdserve.kvstore.store import DEFAULT_CAPACITY_MB
from pdserve.router.policy import PREFILL_POLICIES

DEMO_PROMPTS = ("What is the capital of France?", "巴黎是法国的")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--min-tokens", type=int, default=0)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (the CLI's default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--presence-penalty", type=float, default=0.0)
    g.add_argument("--frequency-penalty", type=float, default=0.0)
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--stop-token-id", action="append", type=int, default=[], dest="stop_token_ids")
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--include-stop-str-in-output", action="store_true")
    g.add_argument("--repetition-max-repeats", type=int, default=0,
                   help="finish with reason 'repetition' after a token loop repeats more than this (0 = off)")


def sampling_from_args(a: argparse.Namespace) -> SamplingParams:
    return SamplingParams(
        max_tokens=a.max_tokens, min_tokens=a.min_tokens, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
        min_p=a.min_p, seed=a.seed, repetition_penalty=a.repetition_penalty, presence_penalty=a.presence_penalty,
        frequency_penalty=a.frequency_penalty, stop=a.stop, stop_token_ids=a.stop_token_ids, ignore_eos=a.ignore_eos,
        include_stop_str_in_output=a.include_stop_str_in_output, repetition_max_repeats=a.repetition_max_repeats,
    )


def generate_in_process(prompt: str, params: SamplingParams, model: str | None, raw: bool) -> None:
    """Run the engine in this process and stream the answer to stdout."""
    from pdserve.engine.llm_engine import LLMEngine
    from pdserve.engine.runtime import Runtime

    runtime = Runtime.load(model)
    tok = runtime.tokenizer
    ids = tok.encode(prompt) if raw else tok.encode_chat([{"role": "user", "content": prompt}])
    engine = LLMEngine(runtime)
    engine.add_request(ids, params)
    for seq, result in engine.stream():
        sys.stdout.write(result.text)
        sys.stdout.flush()
        if result.finished:
            sys.stdout.write(f"\n[finish_reason={seq.finish_reason.value} stop_reason={seq.stop_reason} "
                             f"prompt_tokens={len(seq.prompt_ids)} completion_tokens={len(seq.output_ids)}]\n")


def router_security_from_env() -> dict:
    """TLS and token for talking to the router: $PDSERVE_TLS_CA (with $PDSERVE_TLS_CERT / $PDSERVE_TLS_KEY for a
    client certificate) and $PDSERVE_AUTH_TOKEN, as ``pdserve up --tls --auth-token-file`` prints and uses."""
    ca = os.environ.get("PDSERVE_TLS_CA")
    creds = None
    if ca:
        def read(var: str) -> bytes | None:
            return Path(os.environ[var]).read_bytes() if os.environ.get(var) else None
        creds = grpc.ssl_channel_credentials(Path(ca).read_bytes(), read("PDSERVE_TLS_KEY"), read("PDSERVE_TLS_CERT"))
    return dict(credentials=creds, token=os.environ.get("PDSERVE_AUTH_TOKEN") or None)


def stream_from_router(target: str, request: dict, out=sys.stdout) -> str:
    """Send one request to the router and stream its text; returns the whole answer."""
    from pdserve.client.client import PdserveClient

    text = []
    with PdserveClient(target, **router_security_from_env()) as client:
        for chunk in client.generate(**request):
            out.write(chunk.text)
            out.flush()
            text.append(chunk.text)
            if chunk.finish_reason:
                t, u = chunk.timings, chunk.usage
                out.write(f"\n[finish_reason={chunk.finish_reason}"
                          + (f" stop_reason={chunk.stop_reason}" if chunk.stop_reason else "")
                          + f" prompt_tokens={u.prompt_tokens} cached={u.cached_prompt_tokens}"
                          f" completion_tokens={u.completion_tokens} ttft={t.ttft_wall_s * 1000:.0f}ms"
                          f" e2e={t.e2e_wall_s * 1000:.0f}ms | modeled: ttft={t.ttft_modeled_s * 1000:.1f}ms"
                          f" tpot={t.tpot_modeled_s * 1000:.1f}ms e2e={t.e2e_modeled_s * 1000:.0f}ms]\n")
    return "".join(text)


def cmd_generate(a: argparse.Namespace) -> int:
    params = sampling_from_args(a)
    if a.in_process:
        generate_in_process(a.prompt, params, a.model, a.raw)
        return 0
    request = dict(prompt=a.prompt) if a.raw else dict(messages=[{"role": "user", "content": a.prompt}])
    stream_from_router(a.target, dict(request, **vars(params)))
    return 0


def cmd_chat(a: argparse.Namespace) -> int:
    params = sampling_from_args(a)
    history: list[dict[str, str]] = []
    if a.system:
        history.append({"role": "system", "content": a.system})
    print("pdserve chat: empty line or Ctrl-D to quit", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            break
        if not line.strip():
            break
        history.append({"role": "user", "content": line})
        answer = stream_from_router(a.target, dict(messages=history, **vars(params)))
        history.append({"role": "assistant", "content": answer})
    return 0


def stack_spec_from_args(a: argparse.Namespace):
    from pdserve.client.launcher import StackSpec

    return StackSpec(model=a.model, n_prefill=a.prefill, n_decode=a.decode, n_kvstore=a.kvstore_shards,
                     colocated=a.colocated, policy=a.policy, router_port=a.port, metrics=a.metrics,
                     metrics_base_port=getattr(a, "metrics_base_port", 0),
                     kv_capacity_mb=a.kv_capacity_mb, kv_blocks=a.kv_blocks, pace=a.pace, time_scale=a.time_scale,
                     perf_flags=["--perf-hardware", a.perf_hardware] if a.perf_hardware else [],
                     http_port=getattr(a, "http_port", None))


def cmd_up(a: argparse.Namespace) -> int:
    from pdserve.client.launcher import Stack

    spec = stack_spec_from_args(a)
    spec.tls = a.tls
    if a.auth_token_file:
        from pdserve.router.auth import load_token

        spec.auth_token = load_token(a.auth_token_file)
    stack = Stack(spec, inherit_output=a.verbose)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if a.prometheus_config and not a.metrics:
        raise ValueError("prometheus_config: needs --metrics (the scrape config lists the metrics ports)")
    stack.start()
    try:
        print("pdserve stack is up (Ctrl-C stops it):")
        print(stack.describe())
        if a.prometheus_config:
            from pdserve.client.prometheus_config import write_scrape_config

            rules = [a.prometheus_rules] if a.prometheus_rules else None
            path = write_scrape_config(stack, a.prometheus_config, rule_files=rules,
                                       scrape_interval_s=a.prometheus_scrape_interval_s)
            print(f"prometheus scrape config: {path}")
        if stack.tls_files is not None:
            f = stack.tls_files
            print(f"TLS on every port, mutual TLS between services: CA {f.ca}, certificate {f.cert}, key {f.key}")
        print(f"try: pdserve generate --target {stack.router_target} \"What is the capital of France?\"")
        if stack.edge is not None:
            print(f"OpenAI-compatible API: {stack.http_url}/v1 (e.g. curl {stack.http_url}/v1/models)")
        sys.stdout.flush()
        while not stop.is_set():
            for p in stack.processes:
                if p.popen.poll() is not None:
                    print(f"{p.name} exited with code {p.popen.returncode}; stopping the stack", file=sys.stderr)
                    stop.set()
            stop.wait(0.5)
    finally:
        stack.stop()
        print("pdserve stack stopped")
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    """Start the whole stack, ask the source article's two prompts, stop the stack."""
    from pdserve.client.launcher import Stack

    with Stack(stack_spec_from_args(a)) as stack:
        print("stack up:\n" + stack.describe(), flush=True)
        for prompt in DEMO_PROMPTS:
            print(f"\n>>> {prompt}")
            stream_from_router(stack.router_target, dict(messages=[{"role": "user", "content": prompt}],
                                                         max_tokens=a.max_tokens, temperature=0.0))
    return 0


def cmd_chaos(a: argparse.Namespace) -> int:
    from pdserve.client.chaos import run_chaos

    faults = [f for f in a.faults.split(",") if f]
    return run_chaos(a.model, faults, a.concurrency, a.prompts, a.max_tokens, a.before_s, a.after_s,
                     a.time_scale, a.storm)


def cmd_bench(a: argparse.Namespace) -> int:
    from pdserve.client.bench.command import cmd_bench as bench

    if a.command == "bench-serving":  # the old name of the comparison
        a.compare = True
    try:
        return bench(a)
    except KeyboardInterrupt:  # Ctrl-C ends a long run without a traceback (started stacks stop on the way out)
        print("pdserve bench: interrupted", file=sys.stderr)
        return 130


def cmd_bench_engine(a: argparse.Namespace) -> int:
    from dataclasses import asdict

    from pdserve.engine.bench import format_rows, rows_as_dicts, run_engine_bench
    from pdserve.engine.runtime import Runtime

    batches = tuple(int(x) for x in a.batches.split(","))
    lens = tuple(int(x) for x in a.prompt_lens.split(",") if x)
    contexts = tuple(int(x) for x in a.contexts.split(",") if x)
    # a slab that holds the largest batch at the longest context, as a decode worker sized for it would
    runtime = Runtime.load(a.model, slab_seqs=max(batches), slab_tokens=max(contexts, default=0) + a.steps + 16)
    machine, rows = run_engine_bench(runtime, batches, lens, contexts=contexts, steps=a.steps)
    print(format_rows(machine, rows, runtime.model_name))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"model": runtime.model_name, "machine": asdict(machine), "rows": rows_as_dicts(rows)}, fh,
                      indent=2)
    return 0


def cmd_bench_pacing(a: argparse.Namespace) -> int:
    from pdserve.client.bench_pacing import format_pacing, run_pacing_bench

    levels = tuple(int(x) for x in a.concurrency.split(","))
    rows = run_pacing_bench(levels, a.prompt_len, a.output_len, a.time_scale)
    print(format_pacing(rows, a.time_scale))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


def cmd_perf(a: argparse.Namespace) -> int:
    from pdserve.perfmodel.report import format_report, scenario_report

    try:
        lens = [int(x) for x in a.prefill_lens.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"prefill_lens: {a.prefill_lens!r} is not a comma-separated list of integers") from None
    report = scenario_report(a.model, a.hardware, a.gpus, a.tp, a.ep, lens, a.decode_batch, a.context_len,
                             a.software, a.dp_attention, a.link, a.kv_precision)
    print(json.dumps(report, indent=2) if a.json else format_report(report, show_explain=a.explain))
    return 0


def add_stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF path (default: SmolLM2-135M-Instruct)")
    p.add_argument("--prefill", type=int, default=1, help="prefill workers")
    p.add_argument("--decode", type=int, default=1, help="decode workers")
    p.add_argument("--kvstore-shards", type=int, default=1)
    p.add_argument("--colocated", action="store_true", help="decode workers prefill locally (no kvstore)")
    p.add_argument("--policy", default="cache_aware", choices=PREFILL_POLICIES)
    p.add_argument("--port", type=int, default=50050, help="router port (0: any free port)")
    p.add_argument("--metrics", action="store_true", help="serve Prometheus /metrics on every service")
    p.add_argument("--kv-capacity-mb", type=float, default=DEFAULT_CAPACITY_MB, help="byte budget of each kvstore shard")
    p.add_argument("--kv-blocks", type=int, default=DEFAULT_KV_BLOCKS, help="decode KV budget in blocks")
    p.add_argument("--pace", default="off", choices=PACE_MODES,
                   help="realtime: each step lasts at least its modeled time x --time-scale")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--perf-hardware", default=None, help="modeled GPU for the workers' modeled clock")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pdserve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    target_default = os.environ.get("PDSERVE_ROUTER", "127.0.0.1:50050")

    p = sub.add_parser("up", help="start kvstore, prefill, decode and router as processes; Ctrl-C stops all")
    add_stack_args(p)
    p.add_argument("--verbose", action="store_true", help="show the services' logs")
    p.add_argument("--http-port", type=int, default=None,
                   help="also start the OpenAI-compatible HTTP edge on this port (0: any free port)")
    p.add_argument("--metrics-base-port", type=int, default=DEFAULT_METRICS_BASE_PORT,
                   help="with --metrics: router at base, kvstores at base+10.., prefill base+20.., decode base+50..")
    p.add_argument("--prometheus-config", default=None, metavar="PATH",
                   help="with --metrics: write a Prometheus scrape config for this stack to PATH")
    p.add_argument("--prometheus-rules", default=None, metavar="PATH",
                   help="alert rules file the scrape config loads (e.g. deploy/prometheus/alerts.yml)")
    p.add_argument("--prometheus-scrape-interval-s", type=float, default=5.0, help="scrape interval it sets")
    p.add_argument("--tls", action="store_true",
                   help="generate a CA and serve TLS on every port, mutual TLS between services")
    p.add_argument("--auth-token-file", default=None, help="the router then requires this bearer token")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("generate", help="stream an answer for one prompt")
    p.add_argument("prompt")
    p.add_argument("--target", default=target_default, help="router address [env PDSERVE_ROUTER]")
    p.add_argument("--in-process", action="store_true", help="run the engine here instead of asking the router")
    p.add_argument("--model", default=None, help="GGUF path, with --in-process")
    p.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    add_sampling_args(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("chat", help="interactive chat through the router")
    p.add_argument("--target", default=target_default)
    p.add_argument("--system", default="", help="system message")
    add_sampling_args(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("demo", help="start the stack and answer the source article's two prompts")
    add_stack_args(p)
    p.set_defaults(port=0)
    p.add_argument("--max-tokens", type=int, default=64)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("bench-engine", help="engine throughput against this machine's measured floor")
    p.add_argument("--model", default=None)
    p.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)))
    p.add_argument("--prompt-lens", default=",".join(map(str, DEFAULT_PROMPT_LENS)))
    p.add_argument("--contexts", "--context", dest="contexts", default=",".join(map(str, DEFAULT_CONTEXTS)),
                   help="context lengths of the decode batches (short and long)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--json", default=None, help="also write the rows to this file")
    p.set_defaults(func=cmd_bench_engine)

    p = sub.add_parser("bench-pacing", help="synthetic stack, realtime pacing: wall TPOT vs modeled TPOT")
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--json", default=None)
    p.set_defaults(func=cmd_bench_pacing)

    p = sub.add_parser("perf", help="modeled timing of a scenario on the modeled hardware")
    p.add_argument("--model", default="deepseek-r1", help="deepseek-r1, llama-3-70b, smollm2-135m, ...")
    p.add_argument("--hardware", default="H20-141G", help="H20-96G, H20-141G, H800, H100, H200")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--ep", type=int, default=8)
    p.add_argument("--dp-attention", action="store_true")
    p.add_argument("--software", default="sglang", help="overhead profile: sglang, vllm-awq")
    p.add_argument("--prefill-lens", default="4096", help="prompt lengths prefilled together")
    p.add_argument("--decode-batch", type=int, default=32)
    p.add_argument("--context-len", type=int, default=2048)
    p.add_argument("--link", default="nvlink", choices=KV_LINKS, help="KV hand-off path")
    p.add_argument("--kv-precision", default="", choices=KV_PRECISIONS,
                   help="KV cache precision (default: the model's own; fp8 halves DeepSeek's 70,272 B/token)")
    p.add_argument("--explain", action="store_true",
                   help="per operator group: FLOPs, bytes, the bound it hits, padding and imbalance factors")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_perf)

    p = sub.add_parser("bench", aliases=["bench-serving"],
                       help="load test a running stack (gRPC or OpenAI HTTP); bench-serving = bench --compare")
    add_bench_args(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("chaos", help="the fault matrix: each fault under steady load, answers checked, leaks counted")
    p.add_argument("--model", default=None)
    p.add_argument("--faults", default="none,decode_kill,prefill_kill,kvstore_kill,router_kill,rolling_restart,"
                                       "cancel_storm")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prompts", type=int, default=32, help="distinct requests (each answered once fault-free)")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--before-s", type=float, default=3.0, help="load before the fault")
    p.add_argument("--after-s", type=float, default=8.0, help="load after the fault")
    p.add_argument("--time-scale", type=float, default=2.0, help="decode pacing (modeled step x this)")
    p.add_argument("--storm", type=int, default=0,
                   help="then a cancellation storm of this many requests, a third cancelled at random moments")
    p.set_defaults(func=cmd_chaos)

    from pdserve.sim.cli import register as register_sim  # pdserve simulate / plan

    register_sim(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError, TimeoutError) as exc:
        print(f"pdserve: error: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"pdserve: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into head and the like
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
