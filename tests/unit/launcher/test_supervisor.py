"""The supervisor's restart policy against a scripted stack and clock: backoff, crash loop, readiness timeout, the
roles that keep the stack alive, and the state file ``pdserve up --status`` reads."""

import itertools
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from pdserve.launcher.stack import Process
from pdserve.launcher.state import AttachedStack, status_table
from pdserve.launcher.supervisor import RestartPolicy, Supervisor, exit_text

PIDS = itertools.count(1000)


class FakePopen:
    def __init__(self) -> None:
        self.pid = next(PIDS)
        self.returncode = None

    def poll(self):
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9

    def wait(self, timeout=None):
        return self.returncode


class FakeStack:
    edge = None
    http_url = ""
    router_target = "127.0.0.1:1"
    spec = SimpleNamespace(tls=False, insecure_internal=True)  # a plaintext stack: no identities to record
    identities = None
    log_dir = Path("/nonexistent")

    def __init__(self, *names: str) -> None:
        modules = {"kvstore": "kvstore", "prefill": "prefill_server", "decode": "decode_server", "router": "router"}
        self.processes = [Process(n, modules[n.split("-")[0]], 2000 + i, []) for i, n in enumerate(names)]
        for p in self.processes:
            p.popen = FakePopen()
        self.ready_now = True
        self.launched: list[str] = []

    def launch(self, p: Process) -> None:
        p.popen = FakePopen()
        self.launched.append(p.name)

    def ready(self, p: Process, timeout_s: float = 1.0) -> bool:
        return self.ready_now

    def by_name(self, name: str) -> Process:
        return next(p for p in self.processes if p.name == name)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def supervisor(stack: FakeStack, **policy) -> tuple[Supervisor, Clock, list[str]]:
    clock, lines = Clock(), []
    return Supervisor(stack, RestartPolicy(**policy), log=lines.append, clock=clock), clock, lines


def test_a_killed_process_restarts_after_a_doubling_backoff_then_serves():
    stack = FakeStack("kvstore-0", "prefill-0", "decode-0", "decode-1", "router")
    sup, clock, lines = supervisor(stack, initial_backoff_s=1.0)
    delays = []
    for _ in range(3):
        stack.by_name("decode-0").popen.returncode = -9
        assert sup.tick()
        w = sup.watched[2]
        assert w.state == "backoff"
        delays.append(w.due - clock.now)
        clock.now = w.due - 0.01
        sup.tick()
        assert stack.launched.count("decode-0") == len(delays) - 1  # not before its time
        clock.now = w.due
        sup.tick()  # started
        sup.tick()  # ready
        assert w.state == "serving"
    assert delays == [1.0, 2.0, 4.0]
    assert sup.watched[2].restarts == 3 and sup.watched[2].last_exit == -9
    assert "decode-0 exited with code -9 (SIGKILL); restarting in 1 s (restart 1" in lines[0]
    assert [w.state for w in sup.watched if w.process.name != "decode-0"] == ["serving"] * 4  # others untouched


def test_a_crash_loop_is_left_down_and_the_stack_keeps_serving_while_its_role_has_another():
    stack = FakeStack("kvstore-0", "prefill-0", "decode-0", "decode-1", "router")
    sup, clock, lines = supervisor(stack, max_restarts=2, window_s=60.0, initial_backoff_s=0.5)
    w = sup.watched[2]
    for _ in range(3):
        stack.by_name("decode-0").popen.returncode = 1
        sup.tick()
        clock.now = w.due if w.state == "backoff" else clock.now
        sup.tick()
        sup.tick()
    assert w.state == "failed" and w.restarts == 2
    assert "crash loop: 2 restarts in the last 60 s, left down" in lines[-1]
    assert sup.tick() and not sup.given_up  # decode-1 still serves
    stack.by_name("decode-1").popen.returncode = 1
    sup.watched[3].recent.extend([clock.now] * 2)  # decode-1 has crash-looped too
    assert not sup.tick()
    assert sup.given_up == "decode-0 failed, decode-1 failed"


def test_restarts_older_than_the_window_no_longer_count():
    stack = FakeStack("router")
    sup, clock, _ = supervisor(stack, max_restarts=1, window_s=10.0)
    w = sup.watched[0]
    stack.processes[0].popen.returncode = -9
    sup.tick()
    clock.now = w.due
    sup.tick()
    sup.tick()
    clock.now += 10.0
    stack.processes[0].popen.returncode = -9
    sup.tick()
    assert w.state == "backoff" and w.due - clock.now == 0.5  # the backoff starts over too


def test_a_restarted_process_that_never_gets_ready_is_killed_and_counts_as_an_exit():
    stack = FakeStack("kvstore-0", "router")
    sup, clock, lines = supervisor(stack, start_timeout_s=30.0)
    w = sup.watched[0]
    stack.processes[0].popen.returncode = -9
    sup.tick()
    clock.now = w.due
    stack.ready_now = False
    sup.tick()
    assert w.state == "starting"
    clock.now += 30.0
    sup.tick()
    assert "kvstore-0 was not ready within 30 s; killed" in lines
    assert w.state == "backoff" and w.restarts == 2


@pytest.mark.parametrize(("mode", "code", "state", "serving"), [("on-failure", 0, "exited", False),
                                                               ("on-failure", 1, "backoff", True),
                                                               ("always", 0, "backoff", True),
                                                               ("no", -9, "exited", False)])
def test_restart_modes(mode, code, state, serving):
    stack = FakeStack("router")
    sup, _, _ = supervisor(stack, mode=mode)
    stack.processes[0].popen.returncode = code
    assert sup.tick() is serving
    assert sup.watched[0].state == state


def test_policy_refuses_nonsense():
    with pytest.raises(ValueError, match="restart"):
        RestartPolicy(mode="sometimes")
    with pytest.raises(ValueError, match="backoff"):
        RestartPolicy(initial_backoff_s=0)


def test_exit_text_names_the_signal():
    assert exit_text(-9) == "code -9 (SIGKILL)" and exit_text(3) == "code 3"


def test_state_file_is_private_and_reads_back_as_an_attached_stack(tmp_path):
    stack = FakeStack("kvstore-0", "prefill-0", "decode-0", "router")
    path = tmp_path / "up.json"
    sup = Supervisor(stack, state_file=path, log=lambda line: None, info={"up_pid": os.getpid()})
    stack.processes[2].popen.returncode = -9
    sup.tick()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    attached = AttachedStack(path)
    assert [p.name for p in attached.decodes] == ["decode-0"] and attached.router.name == "router"
    assert attached.process("decode-0").state == "backoff" and attached.process("decode-0").restarts == 1
    table = status_table(json.loads(path.read_text()))
    row = next(line.split() for line in table.splitlines() if line.startswith("decode-0"))
    assert row[3:6] == ["backoff", "1", "-9"]
