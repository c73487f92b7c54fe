"""The ``pdserve`` command line: one module per command group registers its commands here."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import version

import grpc

from pdserve.bench import cli as bench_commands
from pdserve.cli import calibrate, generate, identities, perf, sim, stack
from pdserve.common.config import DefaultsFormatter


def _every_parser(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from _every_parser(child)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pdserve", description="disaggregated prefill/decode serving")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('pdserve')}")
    sub = parser.add_subparsers(dest="command", required=True)
    stack.register(sub)  # up, demo
    identities.register(sub)  # identities
    generate.register(sub, os.environ.get("PDSERVE_ROUTER", "127.0.0.1:50050"))  # generate, chat
    perf.register(sub)  # perf
    sim.register(sub)  # simulate, plan
    calibrate.register(sub)  # calibrate
    bench_commands.register(sub)  # bench and its subcommands (pdserve bench --help)
    for p in _every_parser(parser):
        p.formatter_class = DefaultsFormatter
        for action in p._actions:  # argparse prints no line at all for an option without help
            if action.help is None and action.option_strings:
                action.help = ""
                action.help = DefaultsFormatter("x")._get_help_string(action) or None
        p.set_defaults(usage_parser=p)  # the innermost command's parser wins: its usage goes with its errors
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would print the top-level usage; the command's own is the one that helps
        args.usage_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
