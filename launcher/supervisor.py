"""Keeps a started stack serving, the way ``pdserve up`` runs it: a process that exits is started again.

The policy is Kubernetes' and compose's (``restartPolicy``, ``restart: on-failure``):

- a process that exits (any code with ``always``, a non-zero one with ``on-failure``) is started again on the same
  ports after a backoff that doubles with each restart in the window (``initial_backoff_s`` .. ``max_backoff_s``);
- more than ``max_restarts`` restarts within ``window_s`` is a crash loop: the process is left down (``failed``) and
  the rest keep serving; once some role has no process left that could serve, the stack is given up;
- a restarted process must pass its readiness probe within ``start_timeout_s``, else it is killed and that counts as
  another exit.

Nothing is stopped or restarted for a failed health probe (it is only reported): a slow machine must not turn load into
restarts. The router notices a worker's absence and return through its own health polling (router/workers.py), and
every restart is logged with the exit status. The state (each process, its pid, restarts, health) is written to a file
after every change, for ``pdserve up --status`` and ``pdserve bench chaos --attach`` (launcher/state.py).
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pdserve.launcher.stack import Process, Stack
from pdserve.launcher.state import write_state

RESTART_MODES = ("always", "on-failure", "no")
GIVE_UP_STATES = ("failed", "exited")  # a process in one of these is not coming back


@dataclass
class RestartPolicy:
    mode: str = "always"  # always | on-failure | no (the first exit stops the stack)
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_restarts: int = 5  # restarts within window_s beyond which a process is left down
    window_s: float = 300.0
    start_timeout_s: float = 180.0  # a restarted process not ready by then is killed (a model load on a busy machine)

    def __post_init__(self) -> None:
        if self.mode not in RESTART_MODES:
            raise ValueError(f"restart: {self.mode!r} is not one of {', '.join(RESTART_MODES)}")
        if not 0 < self.initial_backoff_s <= self.max_backoff_s:
            raise ValueError("restart backoff: need 0 < initial <= max")
        if self.max_restarts < 0 or self.window_s <= 0 or self.start_timeout_s <= 0:
            raise ValueError("restart limits: max_restarts >= 0, window_s > 0 and start_timeout_s > 0")

    def backoff_s(self, recent_restarts: int) -> float:
        return min(self.max_backoff_s, self.initial_backoff_s * 2 ** recent_restarts)


@dataclass
class Watched:
    """What the supervisor knows of one process."""

    process: Process
    state: str = "serving"  # serving | backoff (exited, to start again at ``due``) | starting | failed | exited
    restarts: int = 0
    last_exit: int | None = None
    recent: deque = field(default_factory=deque)  # monotonic times of the restarts within the window
    due: float = 0.0  # backoff: when it starts again; starting: when waiting for it to be ready ends
    down_since: float = 0.0
    healthy: bool | None = None  # the last health probe's answer (None: not probed yet)


def exit_text(code: int) -> str:
    """``code 1``, or ``code -9 (SIGKILL)`` for a process a signal ended."""
    if code < 0:
        try:
            return f"code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"code {code}"


class Supervisor:
    def __init__(self, stack: Stack, policy: RestartPolicy | None = None, state_file: str | Path | None = None,
                 log: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
                 health_period_s: float = 5.0, info: dict | None = None) -> None:
        """``info``: what else the state file says of the stack (e.g. the pid of ``pdserve up``)."""
        self.stack = stack
        self.policy = policy or RestartPolicy()
        self.state_file = Path(state_file) if state_file else None
        self.log = log
        self.clock = clock
        self.health_period_s = health_period_s
        self.info = dict(info or {})
        self.watched = [Watched(p) for p in stack.processes]
        self._next_health = 0.0
        self.given_up = ""  # why the stack was given up, once it was

    # --- one pass ---------------------------------------------------------------------------------------------------
    def tick(self) -> bool:
        """Reap exits, start what is due, promote what became ready, probe health now and then. Returns whether the
        stack can still serve."""
        now = self.clock()
        changed = False
        for w in self.watched:
            changed |= self._step(w, now)
        if now >= self._next_health:
            self._next_health = now + self.health_period_s
            for w in self.watched:
                if w.state == "serving":
                    w.healthy = self.stack.ready(w.process)
            changed = True
        if not self.given_up:
            self.given_up = self._lost_role()
            changed |= bool(self.given_up)
        if changed:
            self.write_state()
        return not self.given_up

    def _step(self, w: Watched, now: float) -> bool:
        p = w.process
        if w.state in ("serving", "starting") and p.popen.poll() is not None:
            self._exited(w, now, p.popen.returncode)
            return True
        if w.state == "backoff" and now >= w.due:
            self.stack.launch(p)
            w.state, w.due, w.healthy = "starting", now + self.policy.start_timeout_s, None
            self.log(f"{p.name} starting again (pid {p.pid})")
            return True
        if w.state == "starting":
            if self.stack.ready(p, timeout_s=0.5):
                w.state, w.healthy = "serving", True
                self.log(f"{p.name} is serving again, {now - w.down_since:.1f} s after it went down")
                return True
            if now >= w.due:
                p.popen.kill()
                p.popen.wait()
                self.log(f"{p.name} was not ready within {self.policy.start_timeout_s:g} s; killed")
                self._exited(w, now, p.popen.returncode)
                return True
        return False

    def _exited(self, w: Watched, now: float, code: int) -> None:
        policy, name = self.policy, w.process.name
        w.last_exit, w.down_since, w.healthy = code, now, False
        what = f"{name} exited with {exit_text(code)}"
        if policy.mode == "no":
            w.state = "exited"
            self.given_up = f"{what} (--restart no)"
            return
        if policy.mode == "on-failure" and code == 0:
            w.state = "exited"
            self.log(f"{what}; not restarted (--restart on-failure)")
            return
        while w.recent and w.recent[0] <= now - policy.window_s:
            w.recent.popleft()
        if len(w.recent) >= policy.max_restarts:
            w.state = "failed"
            self.log(f"{what}; crash loop: {len(w.recent)} restarts in the last {policy.window_s:g} s, left down")
            return
        delay = policy.backoff_s(len(w.recent))
        w.recent.append(now)
        w.restarts += 1
        w.state, w.due = "backoff", now + delay
        self.log(f"{what}; restarting in {delay:g} s (restart {w.restarts}, {len(w.recent)} in the last "
                 f"{policy.window_s:g} s)")

    def _lost_role(self) -> str:
        """Why the stack can no longer serve ("" while it can): some role has nobody left to come back."""
        roles: dict[str, list[Watched]] = {}
        for w in self.watched:
            roles.setdefault(w.process.module, []).append(w)
        for members in roles.values():
            if all(w.state in GIVE_UP_STATES for w in members):
                return ", ".join(f"{w.process.name} {w.state}" for w in members)
        return ""

    # --- running ----------------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, period_s: float = 0.25) -> bool:
        """Supervise until ``stop`` is set (True) or the stack is given up (False; ``given_up`` says why)."""
        self.write_state()
        while not stop.is_set():
            if not self.tick():
                return False
            stop.wait(period_s)
        return True

    def status(self) -> list[dict]:
        return [{"name": w.process.name, "module": w.process.module, "target": w.process.target,
                 "metrics_port": w.process.metrics_port, "pid": w.process.pid, "state": w.state,
                 "restarts": w.restarts, "last_exit": w.last_exit, "healthy": w.healthy,
                 "log": str(w.process.log_path or "")} for w in self.watched]

    def _security(self) -> dict:
        """What a reader of the state needs to call the stack's services: whether its ports want TLS, and the
        identities to present (launcher/state.py AttachedStack, ``pdserve up --status``)."""
        spec, identities = self.stack.spec, self.stack.identities
        return {"tls": spec.tls, "internal_tls": not spec.insecure_internal, "log_dir": str(self.stack.log_dir),
                "identities": {role: str(d) for role, d in identities.dirs.items()} if identities else {}}

    def write_state(self) -> None:
        if self.state_file is not None:
            write_state(self.state_file, {**self.info, **self._security(), "router_target": self.stack.router_target,
                                          "http_url": self.stack.http_url if self.stack.edge else "",
                                          "updated": time.time(), "given_up": self.given_up,
                                          "processes": self.status()})
