"""BLAS's idle threads sleep almost at once in every process the command line runs or the launcher starts
(common/blas_spin.py): the variable is read when OpenBLAS loads, so it must be in place before numpy is imported."""

import os
import subprocess
import sys

from pdserve.common.blas_spin import SHORT_SPIN, SPIN_ENV
from pdserve.launcher.stack import Stack, StackSpec


def _cli_process_value(env: dict[str, str]) -> str:
    code = ("import os, sys; import pdserve.cli; assert 'numpy' not in sys.modules; "
            f"value = os.environ['{SPIN_ENV}']; import pdserve.cli.main; print(value)")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_command_line_sets_a_short_spin_before_numpy_loads_and_keeps_the_users():
    env = {k: v for k, v in os.environ.items() if k != SPIN_ENV}
    assert _cli_process_value(env) == SHORT_SPIN
    assert _cli_process_value({**env, SPIN_ENV: "30"}) == "30"


def test_the_launcher_hands_a_short_spin_to_the_processes_it_starts(tmp_path, monkeypatch):
    monkeypatch.delenv(SPIN_ENV, raising=False)
    stack = Stack(StackSpec(), log_dir=tmp_path)
    assert all(stack._env(p)[SPIN_ENV] == SHORT_SPIN for p in stack.processes)
    monkeypatch.setenv(SPIN_ENV, "30")
    assert stack._env(stack.processes[0])[SPIN_ENV] == "30"
