"""``pdserve simulate`` and ``pdserve plan``; the heavy modules load only when a command runs."""

from __future__ import annotations

import argparse


def _simulate(a: argparse.Namespace) -> int:
    from pdserve.sim.command import cmd_simulate

    return cmd_simulate(a)


def _plan(a: argparse.Namespace) -> int:
    from pdserve.sim.plan_command import cmd_plan

    return cmd_plan(a)


def register(sub) -> None:
    from pdserve.sim.args import add_plan_args, add_simulate_args

    p = sub.add_parser("simulate", help="discrete-event simulation of a P/D cluster in virtual time")
    add_simulate_args(p)
    p.set_defaults(func=_simulate)

    p = sub.add_parser("plan", help="search deployments for the best goodput per GPU within SLOs, by simulation")
    add_plan_args(p)
    p.set_defaults(func=_plan)
