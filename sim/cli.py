"""Registers ``pdserve simulate``, ``pdserve bench-simulate`` and ``pdserve plan`` (client/cli.py calls
:func:`register`); the heavy modules load only when a command runs."""

from __future__ import annotations

import argparse


def _simulate(a: argparse.Namespace) -> int:
    from pdserve.sim.command import cmd_simulate

    return cmd_simulate(a)


def _speed(a: argparse.Namespace) -> int:
    from pdserve.sim.speed import cmd_speed

    return cmd_speed(a)


def _plan(a: argparse.Namespace) -> int:
    from pdserve.sim.plan_command import cmd_plan

    return cmd_plan(a)


def register(sub) -> None:
    from pdserve.sim.args import add_simulate_args
    from pdserve.sim.args import add_plan_args

    p = sub.add_parser("simulate", help="discrete-event simulation of a P/D cluster in virtual time")
    add_simulate_args(p)
    p.set_defaults(func=_simulate)

    p = sub.add_parser("bench-simulate", help="simulator speed: requests simulated per wall second on a big cluster")
    p.add_argument("--num-prompts", type=int, default=10_000)
    p.add_argument("--nodes", type=int, default=16, help="8-GPU nodes (one instance per node)")
    p.add_argument("--prefill", type=int, default=6, help="prefill instances (the rest decode)")
    p.add_argument("--request-rate", type=float, default=30.0)
    p.set_defaults(func=_speed)

    p = sub.add_parser("plan", help="search deployments for the best goodput per GPU within SLOs, by simulation")
    add_plan_args(p)
    p.set_defaults(func=_plan)
