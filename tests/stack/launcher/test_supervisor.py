"""``pdserve up`` as a supervisor: a process killed with SIGKILL is started again while the rest keep serving, and the
streams it was running resume elsewhere token for token (the issue's case: two greedy streams, one decode worker killed
after 20 tokens)."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pdserve.client.client import PdserveClient
from pdserve.common.scrape import total
from pdserve.engine.params import SamplingParams
from pdserve.launcher.state import AttachedStack
from tests import REPO_ROOT
from tests.helpers import decode_load, pdserve_up, processes_mentioning, reference, wait_until

ROOT = REPO_ROOT
PROMPTS = [list(range(3, 30)), list(range(40, 71))]
GREEDY = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
PACED = ["--pace", "realtime", "--time-scale", "8"]  # >= ~200 ms a decode step: streams run when the kill lands


def _stream_both(target: str, got: list[list[int]], errors: list[Exception]) -> list[threading.Thread]:
    def read(i: int) -> None:
        try:
            with PdserveClient(target) as client:
                for chunk in client.generate(token_ids=PROMPTS[i], timeout=300, **vars(GREEDY)):
                    got[i].extend(chunk.token_ids)
        except Exception as exc:  # noqa: BLE001 (the assertion below shows it)
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.parametrize("restart", ["always", "no"])
def test_decode_worker_killed_under_pdserve_up(tiny_model_path, tiny_runtime, tmp_path, restart):
    """``always`` (the default): both streams complete token for token, the worker comes back (restart 1), and the
    router uses it again. ``no`` (the old behaviour, and what the test fails with when the supervisor is off): the
    first exit stops the stack, and the clients get UNAVAILABLE. Also started with ``--metrics --http-port 0``, the
    flag pair that crashed."""
    model = tmp_path / "sup-model.gguf"  # a unique path to find this stack's processes by
    model.write_bytes(Path(tiny_model_path).read_bytes())
    state = tmp_path / "up.json"
    proc, _ = pdserve_up(["--model", str(model), "--port", "0", "--decode", "2", "--metrics", "--http-port", "0",
                          "--metrics-base-port", "0", "--state-file", str(state), "--restart", restart, *PACED],
                         until="try:")
    try:
        stack = AttachedStack(state)
        assert stack.scrape(stack.edge)  # the edge's own metrics port is scraped like the others
        want = [r.output_ids for r in reference(tiny_runtime, PROMPTS, [GREEDY] * 2)]
        got: list[list[int]] = [[], []]
        errors: list[Exception] = []
        threads = _stream_both(stack.router_target, got, errors)
        wait_until(lambda: len(got[0]) >= 20 and len(got[1]) >= 20, 120, "20 tokens of each stream")
        victim = next(p for p in stack.decodes if decode_load(stack, p).running)
        os.kill(victim.pid, signal.SIGKILL)
        for t in threads:
            t.join(timeout=300)
        if restart == "no":
            assert proc.wait(timeout=120) == 1
            assert errors and all("UNAVAILABLE" in str(e) for e in errors)
            assert f"{victim.name} exited with code -9 (SIGKILL)" in proc.stdout.read()
            return
        assert not errors and got == want
        back = stack.wait_restarted(victim.name, victim.pid, timeout_s=180)
        assert back.restarts == 1
        status = subprocess.run([sys.executable, "-m", "pdserve.cli.main", "up", "--status", "--state-file",
                                 str(state)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        row = next(line.split() for line in status.stdout.splitlines() if line.startswith(victim.name))
        assert row[3:] == ["serving", "1", "-9", "SERVING"], status.stdout
        # the router takes the worker back through its health polling: requests reach it again
        def generated() -> float:
            return total(stack.scrape(back), "pdserve_decode_generation_tokens_total")

        before = generated()
        with PdserveClient(stack.router_target) as client:
            def one_more_reaches_it() -> bool:
                client.complete(token_ids=PROMPTS[0], max_tokens=4, temperature=0)
                return generated() > before
            wait_until(one_more_reaches_it, 120, "the restarted worker decoding again")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
        log = proc.stdout.read()
        assert f"{victim.name} exited with code -9 (SIGKILL); restarting in" in log
        assert not state.exists() and processes_mentioning(str(model)) == []
    finally:
        stop_up(proc)


def test_pdserve_up_killed_takes_its_services_with_it(tiny_model_path, tmp_path):
    """SIGKILL leaves pdserve up no chance to stop its services: each one stops itself when its parent goes
    (PR_SET_PDEATHSIG), so none is left holding the stack's ports."""
    model = tmp_path / "orphan-model.gguf"
    model.write_bytes(Path(tiny_model_path).read_bytes())
    proc, _ = pdserve_up(["--model", str(model), "--port", "0", "--state-file", str(tmp_path / "up.json")],
                         until="try:")
    try:
        assert len(processes_mentioning(str(model))) == 4
        proc.kill()
        proc.wait()
        wait_until(lambda: processes_mentioning(str(model)) == [], 60, "no service left")
    finally:
        stop_up(proc)


def stop_up(proc: subprocess.Popen) -> None:
    """Stop a pdserve up still running as Ctrl-C would (its services with it), killing it only if that fails."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
