"""The one way a process we started is stopped: SIGTERM, a grace period to exit cleanly, then SIGKILL."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable


def stop_processes(processes: Iterable[subprocess.Popen], grace_s: float = 10.0) -> None:
    """Ask every running one to stop at once, wait for all within one shared ``grace_s``, kill and reap the rest."""
    running = [p for p in processes if p.poll() is None]
    for p in running:
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in running:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
