"""The ``pdserve`` command line."""

from __future__ import annotations

import argparse
import json
import sys

from engine.params import SamplingParams

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
    from engine.llm_engine import LLMEngine
    from engine.runtime import Runtime

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


def cmd_generate(a: argparse.Namespace) -> int:
    generate_in_process(a.prompt, sampling_from_args(a), a.model, a.raw)
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    params = SamplingParams(max_tokens=a.max_tokens, temperature=0.0)
    for prompt in DEMO_PROMPTS:
        print(f">>> {prompt}")
        generate_in_process(prompt, params, a.model, raw=False)
    return 0


def cmd_bench_engine(a: argparse.Namespace) -> int:
    from engine.bench import format_rows, rows_as_dicts, run_engine_bench
    from engine.runtime import Runtime

    runtime = Runtime.load(a.model)
    batches = tuple(int(x) for x in a.batches.split(","))
    lens = tuple(int(x) for x in a.prompt_lens.split(","))
    rows = run_engine_bench(runtime, batches, lens, context=a.context, steps=a.steps)
    print(format_rows(rows, runtime.model_name, a.context))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"model": runtime.model_name, "context": a.context, "rows": rows_as_dicts(rows)}, fh, indent=2)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pdserve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="generate an answer for one prompt")
    p.add_argument("prompt")
    p.add_argument("--model", default=None, help="GGUF path (default: SmolLM2-135M-Instruct)")
    p.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    add_sampling_args(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("demo", help="answer the source article's two prompts")
    p.add_argument("--model", default=None)
    p.add_argument("--max-tokens", type=int, default=64)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("bench-engine", help="engine throughput vs the bare matmul chain")
    p.add_argument("--model", default=None)
    p.add_argument("--batches", default="1,8,32,64")
    p.add_argument("--prompt-lens", default="128,512")
    p.add_argument("--context", type=int, default=64, help="context length of the decode batches")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--json", default=None, help="also write the rows to this file")
    p.set_defaults(func=cmd_bench_engine)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"pdserve: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
