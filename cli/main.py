"""The ``pdserve`` command line: one module per command group registers its commands here."""

from __future__ import annotations

import argparse
import os
import sys

import grpc

from pdserve.bench import cli as bench_commands
from pdserve.cli import calibrate, generate, identities, perf, sim, stack


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pdserve", description="disaggregated prefill/decode serving")
    sub = parser.add_subparsers(dest="command", required=True)
    stack.register(sub)  # up, demo
    identities.register(sub)  # identities
    generate.register(sub, os.environ.get("PDSERVE_ROUTER", "127.0.0.1:50050"))  # generate, chat
    perf.register(sub)  # perf
    sim.register(sub)  # simulate, plan
    calibrate.register(sub)  # calibrate
    bench_commands.register(sub)  # bench serve|engine|kv|pacing|sim|chaos
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
