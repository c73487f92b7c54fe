"""``pdserve calibrate``: fit the performance model to load-test results taken against your own server."""

from __future__ import annotations

import argparse


def _calibrate(a: argparse.Namespace) -> int:
    from pdserve.sim.calibrate import cmd_calibrate

    return cmd_calibrate(a)


def register(sub) -> None:
    from pdserve.perfmodel.calibration import PARAMETERS
    from pdserve.sim.args import add_cluster_args

    p = sub.add_parser("calibrate", help="fit the performance model's overheads to your own bench serve results "
                                         "(pdserve, vLLM or SGLang format) and write a calibration file")
    p.add_argument("results", nargs="+", metavar="RESULT",
                   help="pdserve bench serve --save-result JSON, vllm bench serve --save-result JSON (with or "
                        "without --save-detailed), or SGLang bench_serving JSONL")
    p.add_argument("--out", required=True, metavar="CAL.json", help="the calibration file to write")
    p.add_argument("--fit", default=",".join(PARAMETERS),
                   help=f"the constants to fit, comma separated (default: {','.join(PARAMETERS)})")
    add_cluster_args(p)  # the server the results were taken on: --deployment, instance counts, scheduler flags
    p.set_defaults(func=_calibrate)
