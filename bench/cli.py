"""``pdserve bench``: every benchmark as one command group, after ``vllm bench serve``.

- ``serve``: the load tool against a running stack (gRPC or OpenAI HTTP), a sweep, or ``--compare`` of three stacks;
- ``engine``: the engine's throughput against this machine's floor;
- ``kv``: kvstore Put/Get against bare gRPC and memcpy, and ``--handoff`` inside the stack;
- ``pacing``: the paced synthetic stack's wall TPOT against its modeled TPOT;
- ``sim``: the simulator's speed on a large cluster;
- ``chaos``: the fault matrix under steady load;
- ``stop-rules``: what the completeness rule saves and costs against EOS, on the built-in prompts;
- ``hostile``: oversized and stalled requests against a running stack, what others see meanwhile;
- ``soak``: a long run of mixed load and random faults against ``pdserve up``, memory over time.

Each module loads only when its command runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "serve": ("load test a running stack (gRPC or OpenAI HTTP), a sweep, or --compare", "serve.command"),
    "engine": ("engine throughput against this machine's measured floor", "runtime.engine"),
    "kv": ("kvstore Put/Get throughput against bare gRPC and memcpy; --handoff inside the stack", "kv.command"),
    "pacing": ("synthetic stack, realtime pacing: wall TPOT vs modeled TPOT", "runtime.pacing"),
    "sim": ("simulator speed: requests simulated per wall second on a big cluster", "runtime.sim_speed"),
    "chaos": ("the fault matrix: each fault under steady load, answers checked, leaks counted", "faults.chaos"),
    "stop-rules": ("the completeness rule (stop_when_complete) against EOS on the built-in prompts", "runtime.stop_rules"),
    "hostile": ("requests that try to take more than their share, while others stream", "faults.hostile"),
    "soak": ("a long run against pdserve up: mixed load, random faults, memory of every process plotted", "faults.soak"),
}


def _runner(module: str):
    def run(a: argparse.Namespace) -> int:
        try:
            return importlib.import_module(f"pdserve.bench.{module}").main(a)
        except KeyboardInterrupt:  # Ctrl-C ends a long run without a traceback (started stacks stop on the way out)
            print("pdserve bench: interrupted", file=sys.stderr)
            return 130
    return run


def register(sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks and the load tool: " + ", ".join(COMMANDS))
    group = bench.add_subparsers(dest="bench_command", required=True)
    for name, (help_text, module) in COMMANDS.items():
        p = group.add_parser(name, help=help_text)
        add_args = (importlib.import_module("pdserve.bench.serve.args").add_bench_args if name == "serve"
                    else importlib.import_module(f"pdserve.bench.{module}").add_args)
        add_args(p)
        p.set_defaults(func=_runner(module))
