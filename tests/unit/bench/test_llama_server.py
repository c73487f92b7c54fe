"""The llama_server mode of `bench serve --compare`: where the binary comes from, how it is started (loopback, a key
of the run, one slot per concurrent request), and the mode skipped with the ways to get one where there is none."""

import argparse

import pytest

from pdserve.bench.serve import llama_server as ls


def executable(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No llama-server anywhere: an empty PATH, no variable, an empty cache."""
    monkeypatch.delenv(ls.ENV_BINARY, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_the_binary_is_the_flag_then_the_variable_then_the_path_then_the_cache(nowhere, monkeypatch):
    assert ls.find_llama_server() is None
    built = executable(nowhere / "cache" / "pdserve" / "llama.cpp" / "0.3.36" / "build" / "bin" / "llama-server")
    assert ls.find_llama_server() == built
    on_path = executable(nowhere / "bin" / "llama-server")
    assert ls.find_llama_server() == on_path
    named = executable(nowhere / "opt" / "llama-server")
    monkeypatch.setenv(ls.ENV_BINARY, str(named))
    assert ls.find_llama_server() == named
    given = executable(nowhere / "given" / "llama-server")
    assert ls.find_llama_server(str(given)) == given
    # a path that names nothing runnable is an error naming where it came from, not a fall-through
    with pytest.raises(ValueError, match="--llama-server: /nonexistent/llama-server is not an executable file"):
        ls.find_llama_server("/nonexistent/llama-server")
    monkeypatch.setenv(ls.ENV_BINARY, str(nowhere / "cache"))
    with pytest.raises(ValueError, match=f"\\${ls.ENV_BINARY}: .* is not an executable file"):
        ls.find_llama_server()


def test_without_a_binary_the_mode_is_skipped_naming_the_ways_to_get_one(nowhere):
    a = argparse.Namespace(llama_server=None, build_llama_server=False)
    reason = ls.resolve_llama_server(a)
    assert isinstance(reason, str) and reason.startswith("no llama-server")
    for way in ("--llama-server PATH", f"${ls.ENV_BINARY}", "PATH", "--build-llama-server"):
        assert way in reason


def test_the_server_listens_on_loopback_with_a_slot_per_request(tmp_path):
    cmd = ls.server_command(tmp_path / "llama-server", tmp_path / "m.gguf", 4242, slots=8, ctx_per_slot=300,
                            threads=2)

    def flag(name):
        return cmd[cmd.index(name) + 1]

    assert flag("--host") == "127.0.0.1" and flag("--port") == "4242"
    assert flag("--parallel") == "8" and flag("--ctx-size") == str(8 * 300)  # the context is shared by the slots
    assert flag("--threads") == flag("--threads-batch") == "2" and "--cont-batching" in cmd


def test_the_key_travels_in_the_environment_and_a_server_that_exits_is_an_error_with_its_output(tmp_path):
    fails = tmp_path / "llama-server"
    fails.write_text(f"#!/bin/sh\necho \"key=${ls.KEY_ENV} args=$*\"\necho 'error: failed to load model' >&2\nexit 3\n")
    fails.chmod(0o755)
    server = ls.LlamaServer(fails, tmp_path / "m.gguf", slots=1, ctx_per_slot=64, threads=1)
    with pytest.raises(RuntimeError, match="(?s)exited with code 3\n.*error: failed to load model") as failed:
        with server:
            pass
    # the run's key reached the server, and not through its arguments (which every local user can read)
    assert f"key={server.api_key} args=" in str(failed.value) and server.api_key not in " ".join(server.command)


def test_a_binary_that_cannot_be_executed_is_a_clear_error(tmp_path):
    not_a_program = tmp_path / "llama-server"
    not_a_program.write_bytes(b"\x00\x01 not an executable format")
    not_a_program.chmod(0o755)
    with pytest.raises(RuntimeError, match="could not start"):
        with ls.LlamaServer(not_a_program, tmp_path / "m.gguf", slots=1, ctx_per_slot=64, threads=1):
            pass
