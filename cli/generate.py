"""``pdserve generate`` and ``pdserve chat``: one prompt or a conversation, streamed from the router (or the engine
in this process)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc

from pdserve.engine.params import SamplingParams


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
    g.add_argument("--stop-when-complete", type=float, default=0.0, metavar="P",
                   help="finish with reason 'complete' when the model, asked at a sentence boundary whether its answer "
                        "covers the question, says yes with probability >= P (0 = off)")
    g.add_argument("--stop-when-complete-interval", type=int, default=16, metavar="TOKENS",
                   help="at least this many tokens between two completeness checks")


def sampling_from_args(a: argparse.Namespace) -> SamplingParams:
    return SamplingParams(
        max_tokens=a.max_tokens, min_tokens=a.min_tokens, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
        min_p=a.min_p, seed=a.seed, repetition_penalty=a.repetition_penalty, presence_penalty=a.presence_penalty,
        frequency_penalty=a.frequency_penalty, stop=a.stop, stop_token_ids=a.stop_token_ids, ignore_eos=a.ignore_eos,
        include_stop_str_in_output=a.include_stop_str_in_output, repetition_max_repeats=a.repetition_max_repeats,
        stop_when_complete=a.stop_when_complete, stop_when_complete_interval=a.stop_when_complete_interval,
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
                             f"prompt_tokens={len(seq.prompt_ids)} completion_tokens={len(seq.output_ids)}"
                             f"{completion_summary(seq.completion)}]\n")


def completion_summary(state) -> str:
    """What the completeness checks of one answer did and cost ("" when the rule is off)."""
    if state is None:
        return ""
    p = "-" if state.last_p_yes is None else f"{state.last_p_yes:.3f}"
    return f" completeness_checks={state.checks} check_tokens={state.check_tokens} last_p_yes={p}"


def router_security_from_env() -> dict:
    """TLS and token for talking to the router: $PDSERVE_TLS_CA (with $PDSERVE_TLS_CERT / $PDSERVE_TLS_KEY for a
    client certificate) and $PDSERVE_AUTH_TOKEN, as ``pdserve up --tls --auth-token-file`` prints and uses. The
    router's certificate must be valid for $PDSERVE_TLS_SERVER_NAME (default ``router``, which of a stack's
    certificates only the router's carries; empty: the address dialed, for a router with a public CA's certificate)."""
    from pdserve.client.client import ROUTER_NAME

    ca = os.environ.get("PDSERVE_TLS_CA")
    creds = None
    if ca:
        def read(var: str) -> bytes | None:
            return Path(os.environ[var]).read_bytes() if os.environ.get(var) else None
        creds = grpc.ssl_channel_credentials(Path(ca).read_bytes(), read("PDSERVE_TLS_KEY"), read("PDSERVE_TLS_CERT"))
    return dict(credentials=creds, token=os.environ.get("PDSERVE_AUTH_TOKEN") or None,
                server_name=os.environ.get("PDSERVE_TLS_SERVER_NAME", ROUTER_NAME) or None)


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


def register(sub, target_default: str) -> None:
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
