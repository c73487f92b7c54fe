"""Flags and their PDSERVE_* environment variables go through the same argparse checks."""

import pytest

from pdserve.kvstore.main import build_parser as kvstore_parser
from pdserve.worker.flags import worker_parser


def parse(monkeypatch, env: dict, argv: list[str]):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return worker_parser("decode_server", 50071, max_queue=512).parse_args(argv)


def test_environment_sets_defaults_and_the_command_line_wins(monkeypatch):
    args = parse(monkeypatch, {"PDSERVE_PORT": "6000", "PDSERVE_PACE": "realtime", "PDSERVE_MAX_QUEUE": "7"}, [])
    assert (args.port, args.pace, args.max_queue) == (6000, "realtime", 7)
    assert parse(monkeypatch, {"PDSERVE_PORT": "6000"}, ["--port", "6001"]).port == 6001
    assert parse(monkeypatch, {"PDSERVE_PORT": "6000"}, ["--port=6002"]).port == 6002


@pytest.mark.parametrize("name,value,expect", [
    ("PDSERVE_PACE", "bogus", "PDSERVE_PACE='bogus': must be one of off, realtime"),
    ("PDSERVE_PORT", "x", "PDSERVE_PORT='x': invalid value for --port"),
    ("PDSERVE_KV_LINK", "carrier-pigeon", "PDSERVE_KV_LINK"),
])
def test_a_bad_environment_value_is_a_usage_error_naming_the_variable(monkeypatch, capsys, name, value, expect):
    with pytest.raises(SystemExit) as exit_info:
        parse(monkeypatch, {name: value}, [])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err


def test_help_names_each_variable_but_not_one_for_help(capsys):
    with pytest.raises(SystemExit):
        worker_parser("decode_server", 50071, max_queue=512).parse_args(["-h"])
    out = capsys.readouterr().out
    assert "PDSERVE_KVSTORE" in out and "PDSERVE_HELP" not in out


def test_fault_injection_cannot_be_switched_on_from_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("PDSERVE_ENABLE_FAULT_INJECTION", "1")
    assert kvstore_parser().parse_args([]).enable_fault_injection is False
    assert kvstore_parser().parse_args(["--enable-fault-injection"]).enable_fault_injection is True
    with pytest.raises(SystemExit):
        kvstore_parser().parse_args(["-h"])
    assert "PDSERVE_ENABLE_FAULT_INJECTION" not in capsys.readouterr().out


def test_boolean_variables(monkeypatch):
    from pdserve.router.server import build_parser as router_parser

    monkeypatch.setenv("PDSERVE_COLOCATED", "yes")
    assert router_parser().parse_args([]).colocated is True
    monkeypatch.setenv("PDSERVE_COLOCATED", "off")
    assert router_parser().parse_args([]).colocated is False
    monkeypatch.setenv("PDSERVE_COLOCATED", "maybe")
    with pytest.raises(SystemExit):
        router_parser().parse_args([])


def test_the_model_step_runs_nicer_by_default(monkeypatch):
    assert parse(monkeypatch, {}, []).model_step_nice == 5
    assert parse(monkeypatch, {}, ["--model-step-nice", "0"]).model_step_nice == 0
    with pytest.raises(SystemExit):
        parse(monkeypatch, {}, ["--model-step-nice", "-1"])  # raising priority needs privileges; not a flag's job


def test_lower_thread_priority_lowers_only_the_calling_thread():
    import os
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from pdserve.worker.worker import lower_thread_priority

    def nice_of_this_thread() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    mine = nice_of_this_thread()
    with ThreadPoolExecutor(1, initializer=lower_thread_priority, initargs=(3,)) as pool:
        assert pool.submit(nice_of_this_thread).result() == min(mine + 3, 19)
    assert nice_of_this_thread() == mine
