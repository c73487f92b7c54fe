"""The command line as vLLM's users expect it: --version, defaults in every --help, the command's own usage with an
unrecognized argument, and start-up mistakes named by their flag before anything is started or loaded."""

import socket

import pytest

from pdserve.cli.main import build_parser, main
from pdserve.launcher.stack import Stack


@pytest.fixture
def nothing_starts(monkeypatch):
    """pdserve up must fail before the stack starts (no model load, no process)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the stack started before the flags were checked")
    monkeypatch.setattr(Stack, "start", refuse)


@pytest.fixture
def taken_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("pdserve 0.")


def test_an_unrecognized_argument_prints_the_commands_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "serve", "--no-such-flag"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: pdserve bench serve") and "--no-such-flag" in err


def test_every_help_shows_defaults():
    parser = build_parser()
    up = parser._subparsers._group_actions[0].choices["up"]
    text = " ".join(up.format_help().split())
    assert "(default: 50050)" in text and "(default: 127.0.0.1)" in text and "(default: cache_aware)" in text


@pytest.mark.parametrize("args,flag", [
    (["--port", "{port}"], "--port"),
    (["--port", "0", "--http-port", "{port}"], "--http-port"),
    (["--port", "0", "--metrics", "--metrics-base-port", "{port}"], "--metrics-base-port"),
])
def test_a_taken_port_is_named_by_its_flag_before_start(nothing_starts, taken_port, capsys, args, flag):
    assert main(["up", "--model", "synthetic", *(a.format(port=taken_port) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pdserve: error: {flag}: port {taken_port}") and "in use" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("model,says", [
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "a Hugging Face id is not fetched"),
    ("{not_gguf}", "not a readable GGUF file"),
])
def test_a_bad_model_is_named_by_its_flag_before_start(nothing_starts, tmp_path, capsys, model, says):
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("not a model")
    assert main(["up", "--port", "0", "--model", model.format(not_gguf=not_gguf)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pdserve: error: --model ") and says in err and "kv" not in err


def test_up_passes_host_served_model_name_and_log_dir_to_the_stack(monkeypatch, tmp_path, capsys):
    seen = {}

    def record(stack, *args, **kwargs):
        seen.update(spec=stack.spec, log_dir=stack.log_dir)
        raise RuntimeError("recorded")
    monkeypatch.setattr(Stack, "start", record)
    logs = tmp_path / "logs"
    assert main(["up", "--model", "synthetic", "--port", "0", "--host", "127.0.0.1", "--served-model-name", "smollm",
                 "--log-dir", str(logs)]) == 2
    assert seen["spec"].extra["router"] == ["--served-model-name", "smollm"] and seen["spec"].host == "127.0.0.1"
    assert seen["log_dir"] == logs and logs.is_dir()


@pytest.mark.parametrize("deployment,says", [("hardware=B900", "known: H20-96G"), ("model=llama-99b", "known: deepseek-r1")])
def test_an_unknown_gpu_or_model_lists_the_known_ones_before_start(nothing_starts, capsys, deployment, says):
    assert main(["up", "--model", "synthetic", "--port", "0", "--deployment", deployment]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pdserve: error: --deployment: ") and says in err


def test_service_help_shows_defaults_and_the_module_to_run():
    from pdserve.router.server import build_parser as router_parser

    text = " ".join(router_parser().format_help().split())
    assert text.startswith("usage: python -m pdserve.router") and "(default: 50050)" in text
