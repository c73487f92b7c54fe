"""The fault matrix's rows for a supervised stack: kill -9 one process of a role and let the supervisor (the one
``pdserve up`` runs) bring it back, the load running throughout.

The stack is either a running ``pdserve up`` (``pdserve bench chaos --attach``: found through its state file) or the
matrix's own stack, supervised for the length of the row by the same :class:`launcher.supervisor.Supervisor` in a
thread. Either way the fault reads the state file: which process of the role to kill (its pid), and when the
supervisor reports it serving again under a new pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from pdserve.launcher.stack import Stack
from pdserve.launcher.state import AttachedStack, read_state
from pdserve.launcher.supervisor import RestartPolicy, Supervisor

RESTART_WAIT_S = 300.0  # a worker reloads its model; a busy 2-core machine is slow at it
UP_ROLES = {"kvstore": "kvstore", "prefill": "prefill_server", "decode": "decode_server", "router": "router",
            "openai": "openai_server"}


def kill_under_up(module: str, pick: Callable[[object, list], object] = lambda _stack, members: members[-1]):
    """SIGKILL one process of ``module`` (``pick(stack, members)`` chooses among them) and wait until the supervisor
    has it serving again."""
    def fault(stack, supervised: AttachedStack) -> None:
        supervised.refresh()
        members = [p for p in supervised.processes if p.module == module]
        if not members:
            raise ValueError(f"fault: the stack has no {module} process to kill")
        victim = pick(supervised, members)
        os.kill(victim.pid, signal.SIGKILL)
        supervised.wait_restarted(victim.name, victim.pid, RESTART_WAIT_S)
    return fault


def restarts(supervised: AttachedStack | None) -> int:
    """Restarts the supervisor has made so far, all processes together."""
    if supervised is None:
        return 0
    supervised.refresh()
    return sum(p.restarts for p in supervised.processes)


@contextlib.contextmanager
def supervising(stack) -> Iterator[AttachedStack]:
    """The stack as its state file shows it, with a supervisor running meanwhile: an attached ``pdserve up`` has its
    own; the matrix's own stack gets one in a thread for as long as the block runs."""
    if isinstance(stack, AttachedStack):
        yield stack
        return
    assert isinstance(stack, Stack)
    path = stack.log_dir / "chaos-up-state.json"
    supervisor = Supervisor(stack, RestartPolicy(), path, log=lambda line: print(f"    {line}", flush=True),
                            info={"up_pid": os.getpid()})
    supervisor.write_state()
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield AttachedStack(path)
    finally:
        stop.set()
        thread.join()
        path.unlink(missing_ok=True)


def attach(path: Path) -> AttachedStack:
    """A running ``pdserve up`` the matrix can drive: plaintext, no token, and with metrics (the matrix reads the
    router's and the workers' counters)."""
    state = read_state(path)
    if state.get("tls") or state.get("auth"):
        raise ValueError("attach: the matrix drives a plaintext stack without a token (start pdserve up without "
                         "--tls and --auth-token-file)")
    if not all(p["metrics_port"] for p in state["processes"]):
        raise ValueError("attach: start pdserve up with --metrics (the matrix reads every service's counters)")
    return AttachedStack(path)
