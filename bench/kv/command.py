"""``pdserve bench kv``: the flags, and which measurement they ask for (throughput by default, ``--scale`` or
``--handoff``)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from pdserve.bench.kv.throughput import DEFAULT_BLOCK_BYTES, format_kv_table, rows_as_dicts, run_kv_bench
from pdserve.engine.kv.dtype import KV_DTYPES


def _positive_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def main(a: argparse.Namespace) -> int:
    for name in ("total_mb", "block_kb"):
        if getattr(a, name) <= 0:
            print(f"pdserve bench kv: --{name.replace('_', '-')} must be > 0", file=sys.stderr)
            return 2
    if a.repeat < 1:
        print("pdserve bench kv: --repeat must be >= 1", file=sys.stderr)
        return 2
    if a.scale:
        from pdserve.bench.kv.scale import run_scale

        return run_scale(a)
    if a.handoff:
        from pdserve.bench.kv.handoff import MODES, format_handoff, run_handoff_bench

        modes = [m.strip() for m in a.modes.split(",") if m.strip()]
        unknown = [m for m in modes if m not in MODES]
        if unknown or a.prompt_len < 1 or a.chunk_tokens < 1 or a.requests < 1:
            print(f"pdserve bench kv: --modes must name some of {', '.join(MODES)}; --prompt-len, --chunk-tokens and "
                  "--requests must be >= 1", file=sys.stderr)
            return 2
        kv_dtypes = tuple(x for x in a.kv_dtypes.split(",") if x)
        if any(x not in KV_DTYPES for x in kv_dtypes):
            print(f"pdserve bench kv: --kv-dtypes must name some of {', '.join(KV_DTYPES)}", file=sys.stderr)
            return 2
        handoff = run_handoff_bench(a.model, a.prompt_len, a.requests, a.chunk_tokens, modes, kv_dtypes=kv_dtypes)
        print(format_handoff(handoff, a.prompt_len, a.chunk_tokens))
        if a.json:
            with open(a.json, "w") as fh:
                json.dump([asdict(r) for r in handoff], fh, indent=2)
        return 0
    block_bytes = int(a.block_kb * 1024)
    rows = run_kv_bench(a.total_mb, block_bytes, a.streams, a.repeat)
    print(format_kv_table(rows, block_bytes))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"block_bytes": block_bytes, "rows": rows_as_dicts(rows)}, fh, indent=2)
    return 0


def add_args(p) -> None:
    p.add_argument("--total-mb", type=float, default=48.0, help="MiB each stream moves per round")
    p.add_argument("--block-kb", type=float, default=DEFAULT_BLOCK_BYTES / 1024,
                   help="block size in KiB (default: a 16-token block of SmolLM2-135M)")
    p.add_argument("--streams", type=_positive_ints, default=(1, 4), help="concurrent streams, comma separated")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the best is kept")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    from pdserve.bench.kv.scale import add_scale_args

    add_scale_args(p)
    g = p.add_argument_group("--handoff: the hand-off inside the stack (bench/kv/handoff.py)")
    g.add_argument("--handoff", action="store_true",
                   help="instead: start a stack per mode and time TTFT and the first-to-second-token gap")
    g.add_argument("--modes", default="store per chunk,+ prefetch,+ prefetch + shm")
    g.add_argument("--model", default=None, help="GGUF (default: SmolLM2-135M-Instruct)")
    g.add_argument("--prompt-len", type=int, default=1024)
    g.add_argument("--chunk-tokens", type=int, default=256, help="prefill's --max-num-batched-tokens")
    g.add_argument("--requests", type=int, default=4, help="measured requests per mode (after one warm-up)")
    g.add_argument("--kv-dtypes", default="float32,float16", help="each mode's stack once per KV dtype")
