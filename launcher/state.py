"""The state file of a running ``pdserve up``: how a second command finds the stack and its processes.

The supervisor (launcher/supervisor.py) rewrites it after every change: each process's name, role, address, metrics
port, pid, state, restarts, last exit status and last health probe. ``pdserve up --status`` prints it with a live
probe of each process; ``pdserve bench chaos --attach`` reads it to find what to kill and waits on it for the restart.
It lives in a directory only its user can read (``common/private_dir.py``: a squatted one is skipped), one file per
router port, and is removed when ``pdserve up`` stops.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from pdserve.common.private_dir import private_dir
from pdserve.common.readiness import grpc_serving, http_ok
from pdserve.launcher.identities import StackIdentities, StackSecurity
from pdserve.workload.report import fixed_width


def state_dir() -> Path:
    """This user's private directory (``common/private_dir.py``): a squatted one is skipped, never fatal."""
    return private_dir()


def default_state_path(router_port: int) -> Path:
    """The state file of the stack whose router listens on ``router_port``, in a directory only this user reads."""
    return state_dir() / f"up-{router_port}.json"


def write_state(path: Path, state: dict) -> None:
    """Replace the file atomically (a reader never sees half of it); only this user may read it."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(state, indent=1))
    os.replace(tmp, path)


class NoStack(Exception):
    """No running ``pdserve up`` behind this state file."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(path: Path) -> dict:
    """The state a running ``pdserve up`` wrote; NoStack if there is none (or it died without cleaning up)."""
    try:
        state = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise NoStack(f"no pdserve up state at {path} (is a stack running on that port?)") from None
    if not pid_alive(state.get("up_pid", 0)):
        raise NoStack(f"{path} is stale: pdserve up (pid {state.get('up_pid')}) is gone")
    return state


@dataclass
class ProcessView:
    """A process of a stack some other command started, as its state file describes it."""

    name: str
    module: str
    target: str
    metrics_port: int
    pid: int
    state: str
    restarts: int


class AttachedStack(StackSecurity):
    """A running ``pdserve up`` seen through its state file, with the parts of :class:`launcher.stack.Stack` that the
    fault matrix reads (``router_target``, ``router``, ``kvstores``, ``prefills``, ``decodes``, ``processes``, and the
    stack's identities to call its services as a role)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.refresh()
        identities = {role: Path(d) for role, d in self.state.get("identities", {}).items()}
        self.spec = SimpleNamespace(insecure_internal=not self.state.get("internal_tls", False),
                                    tls=bool(self.state.get("tls")), host="127.0.0.1")
        self.identities = (StackIdentities(Path(self.state["log_dir"]) / "identities", identities) if identities
                           else None)

    def refresh(self) -> None:
        self.state = read_state(self.path)
        self.processes = [ProcessView(p["name"], p["module"], p["target"], p["metrics_port"], p["pid"], p["state"],
                                      p["restarts"]) for p in self.state["processes"]]
        by_module = {m: [p for p in self.processes if p.module == m]
                     for m in ("kvstore", "prefill_server", "decode_server", "router", "openai_server")}
        self.kvstores, self.prefills, self.decodes = (by_module[m] for m in ("kvstore", "prefill_server",
                                                                              "decode_server"))
        self.router = by_module["router"][0]
        self.edge = (by_module["openai_server"] or [None])[0]
        self.router_target = self.state["router_target"]

    def process(self, name: str) -> ProcessView:
        self.refresh()
        return next(p for p in self.processes if p.name == name)

    def wait_restarted(self, name: str, old_pid: int, timeout_s: float) -> ProcessView:
        """Wait until the supervisor reports ``name`` serving again under a new pid."""
        deadline = time.monotonic() + timeout_s
        while True:
            p = self.process(name)
            if p.pid != old_pid and p.state == "serving":
                return p
            if p.state in ("failed", "exited") or time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not come back within {timeout_s:g}s (state {p.state})")
            time.sleep(0.1)


def status_table(state: dict) -> str:
    """``pdserve up --status``: every process with its state, restarts, last exit and a live health probe."""
    lines = [f"pdserve up (pid {state['up_pid']}), router {state['router_target']}"
             + (f", OpenAI API {state['http_url']}/v1" if state.get("http_url") else "")]
    if state.get("given_up"):
        lines.append(f"given up: {state['given_up']}")
    admin = None  # the probes call as the stack's admin identity (launcher/identities.py) where a port wants one
    if state.get("identities"):
        from pdserve.common.identity import Identity

        admin = Identity.load(state["identities"]["admin"])
    rows = []
    for p in state["processes"]:
        public = p["module"] in ("router", "openai_server")
        secured = state.get("tls") if public else state.get("internal_tls")
        if p["state"] != "serving" or (secured and admin is None):
            health = "-"
        elif p["module"] == "openai_server":
            health = "ok" if http_ok(f"{state['http_url']}/health", cafile=admin.ca_path if secured else None) \
                else "failing"
        else:
            health = "SERVING" if grpc_serving(p["target"], admin.channel_credentials if secured else None) \
                else "failing"
        last = "-" if p["last_exit"] is None else str(p["last_exit"])
        rows.append((p["name"], p["pid"], p["target"], p["state"], p["restarts"], last, health))
    columns = [("process", "<12"), ("pid", ">8"), ("address", "<16"), ("state", "<9"), ("restarts", ">8"),
               ("last exit", ">9"), ("health now", "<10")]
    return "\n".join(lines + fixed_width(columns, rows))
