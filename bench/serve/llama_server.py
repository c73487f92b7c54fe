"""llama.cpp's own server beside pdserve in ``bench serve --compare`` (the ``llama_server`` mode).

``llama-server`` is llama.cpp's OpenAI-compatible HTTP server: ``-np`` slots decoded together (continuous batching),
each slot its own KV cells. The mode starts it on the same GGUF file with as many slots as the workload's
concurrency, every core's thread, loopback only and an API key made for the run, and sends the same requests
through the OpenAI backend (token-id prompts to ``/v1/completions``, EOS ignored), so its row compares like with like
with the in-process engine's.

The binary is ``--llama-server PATH``, else ``$PDSERVE_LLAMA_SERVER``, else ``llama-server`` on the PATH, else one
built before into the cache. ``--build-llama-server`` builds it there from the source of the release the ``peer``
extra installs (llama-cpp-python's source distribution carries llama.cpp's tree; cmake builds the one target, many
minutes on 2 cores). Without any of them the mode is skipped with a message naming these ways.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
from functools import partial
from pathlib import Path

from pdserve.bench.serve.backends import OpenAIBackend
from pdserve.bench.serve.command import run_workload
from pdserve.common.processes import stop_processes
from pdserve.common.readiness import http_ok, wait_for
from pdserve.engine.model.default_model import resolve_model_path
from pdserve.launcher.ports import free_port
from pdserve.workload.datasets import BenchRequest
from pdserve.workload.record import LoadSpec, RunResult

ENV_BINARY = "PDSERVE_LLAMA_SERVER"
PEER_REQUIREMENT = "llama-cpp-python>=0.3"  # the peer extra's, in pyproject.toml
START_TIMEOUT_S = 300.0  # loading the file and warming up; a slow machine's first start
HOW_TO_GET = (f"pass --llama-server PATH, set ${ENV_BINARY}, put llama-server on the PATH, or add --build-llama-server "
              "(builds it from the peer extra's llama.cpp source: cmake and a C++ compiler, many minutes)")
KEY_ENV = "LLAMA_API_KEY"  # llama-server reads its key from here: not on the command line, where ps shows it


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "pdserve" / "llama.cpp"


def cached_binaries() -> list[Path]:
    """Servers built before: the installed peer release's first, then the most recently built."""
    found = [p for p in cache_dir().glob("*/build/bin/llama-server") if os.access(p, os.X_OK)]
    pinned = peer_version()
    return sorted(found, key=lambda p: (p.parents[2].name == pinned, p.stat().st_mtime), reverse=True)


def find_llama_server(explicit: str | None = None) -> Path | None:
    for source, candidate in (("--llama-server", explicit), (f"${ENV_BINARY}", os.environ.get(ENV_BINARY)),
                              ("the PATH", shutil.which("llama-server"))):
        if candidate:
            if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
                raise ValueError(f"{source}: {candidate} is not an executable file")
            return Path(candidate)
    cached = cached_binaries()
    return cached[0] if cached else None


def peer_version() -> str | None:
    """The llama-cpp-python release installed for the peer, if any (the server is built from the same one)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return None


def build_llama_server(log=print) -> Path:
    """Download the peer extra's source distribution and build its ``llama-server`` into the cache."""
    for tool in ("cmake", "cc", "c++"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"building llama-server needs {tool}, which is not on the PATH")
    pinned = peer_version()
    requirement = f"llama-cpp-python=={pinned}" if pinned else PEER_REQUIREMENT
    with tempfile.TemporaryDirectory(prefix="pdserve-llama-") as tmp:
        log(f"downloading the source of {requirement} (the peer extra's llama.cpp)")
        _step("downloading llama-cpp-python's source", [sys.executable, "-m", "pip", "download", "--no-binary",
                                                        "llama-cpp-python", "--no-deps", "--quiet", "-d", tmp,
                                                        requirement])
        (archive,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        release = archive.name.removeprefix("llama_cpp_python-").removesuffix(".tar.gz")
        target = cache_dir() / release
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        source = Path(tmp) / f"llama_cpp_python-{release}" / "vendor" / "llama.cpp"
        build = target / "build"
        shutil.rmtree(build, ignore_errors=True)  # a build cut short keeps a cache naming a source that is gone
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        log(f"building llama-server of llama.cpp (llama-cpp-python {release}) in {build}")
        _step("configuring llama.cpp", ["cmake", "-S", str(source), "-B", str(build), *generator,
                                        "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF",
                                        "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
                                        "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF"])
        _step("building llama-server", ["cmake", "--build", str(build), "--target", "llama-server", "-j",
                                        str(os.cpu_count() or 1)])
    binary = build / "bin" / "llama-server"
    if not binary.exists():
        raise RuntimeError(f"the build finished without {binary}")
    return binary


def _step(what: str, command: list[str]) -> None:
    """One step of the build; its failure an error that says which step and shows the end of its output."""
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stdout[-2000:].strip()}")


def server_command(binary: Path, model: Path, port: int, slots: int, ctx_per_slot: int, threads: int) -> list[str]:
    """llama-server on loopback: ``slots`` sequences decoded together, each with ``ctx_per_slot`` tokens of KV (the
    API key goes in the environment, ``KEY_ENV``)."""
    return [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--parallel", str(slots), "--ctx-size", str(slots * ctx_per_slot), "--threads", str(threads),
            "--threads-batch", str(threads), "--cont-batching", "--no-webui"]


class LlamaServer:
    """A running llama-server, stopped on exit; ``base_url`` and ``api_key`` are the OpenAI backend's."""

    def __init__(self, binary: Path, model: Path, slots: int, ctx_per_slot: int, threads: int) -> None:
        self.port = free_port()
        self.api_key = secrets.token_urlsafe(24)
        self.command = server_command(binary, model, self.port, slots, ctx_per_slot, threads)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = tempfile.TemporaryFile()
        self.popen: subprocess.Popen | None = None

    def __enter__(self) -> LlamaServer:
        try:  # /health answers without the key, 200 once the model is loaded
            try:
                self.popen = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                              env={**os.environ, KEY_ENV: self.api_key})
            except OSError as exc:
                raise RuntimeError(f"llama-server {self.command[0]} could not start: {exc}") from None
            wait_for(partial(http_ok, f"http://127.0.0.1:{self.port}/health"), START_TIMEOUT_S, "llama-server healthy",
                     self.popen, self._tail)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.popen is not None:
            stop_processes([self.popen])
        self.log.close()

    def _tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:].strip()


def resolve_llama_server(a: argparse.Namespace) -> Path | str:
    """The binary the llama_server mode runs (built first with ``--build-llama-server`` where none is found), or
    the reason there is none. Called before the first mode runs, so a bad path or a failed build costs no run."""
    binary = find_llama_server(a.llama_server)
    if binary is None:
        if not a.build_llama_server:
            return f"no llama-server: {HOW_TO_GET}"
        binary = build_llama_server()
    return binary


def run_llama_server_mode(binary: Path, model: str | None, requests: list[BenchRequest], spec: LoadSpec) -> RunResult:
    """The workload against ``binary`` serving ``model``."""
    slots = spec.max_concurrency or 64  # the in-process engine's batch when the workload sets none
    ctx_per_slot = max(len(r.token_ids or ()) + r.output_len for r in requests) + 16
    if any(r.token_ids is None for r in requests):
        ctx_per_slot = max(ctx_per_slot, 4096)  # text prompts: their token counts are the server's to find
    with LlamaServer(binary, resolve_model_path(model), slots, ctx_per_slot, os.cpu_count() or 1) as server:
        return run_workload(lambda: OpenAIBackend(server.base_url, api_key=server.api_key), requests, spec)
