"""Starts a whole pdserve stack as separate processes on loopback: ``pdserve up``, the demo, the tests, the benchmarks.

Each service runs as ``python -m <service>`` with its own flags. The internal plane is secured unless the spec says
``insecure_internal``: a CA and a certificate per role are made at start (``launcher/identities.py``), and each
process runs as its role. ``Stack.start()`` returns once every process answers grpc.health.v1 with SERVING;
``Stack.stop()`` sends SIGTERM, waits, and kills what is left: no orphans.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pdserve.common.blas_spin import short_blas_spin
from pdserve.common.processes import stop_processes
from pdserve.common.readiness import grpc_serving, http_ok, wait_for
from pdserve.common.server import PARENT_ENV
from pdserve.engine.kv.budget import DEFAULT_KV_BLOCKS
from pdserve.engine.model.kernels.core_share import CORE_SHARE_ENV, create_core_share
from pdserve.kvstore.shm import available as shm_available
from pdserve.kvstore.store import DEFAULT_CAPACITY_MB
from pdserve.launcher.identities import StackSecurity
from pdserve.launcher.ports import free_port, metrics_port_for


@dataclass
class StackSpec:
    model: str | None = None
    kv_dtype: str = "float32"  # the KV cache's element type on the workers, the kvstore's blocks and the router's keys
    n_prefill: int = 1
    n_decode: int = 1
    n_kvstore: int = 1
    colocated: bool = False
    policy: str = "cache_aware"
    host: str = "127.0.0.1"
    router_port: int = 0  # 0: a free port
    kv_capacity_mb: float = DEFAULT_CAPACITY_MB
    kv_blocks: int = DEFAULT_KV_BLOCKS
    metrics: bool = False
    metrics_base_port: int = 0  # with metrics: fixed ports from here (METRICS_OFFSETS); 0: free ports
    fault_injection: bool = False
    # KV blocks through shared memory between the kvstores and the workers (all on this host: fewer copies than TLS)
    kv_shm: bool = True
    extra: dict[str, list[str]] = field(default_factory=dict)  # service -> extra flags
    pace: str = "off"  # modeled clock for prefill and decode workers: off | realtime
    time_scale: float = 1.0
    deployment: str = ""  # the workers' modeled deployment, KEY=V,.. (e.g. "hardware=H200")
    threads_per_worker: int | None = None  # BLAS threads per model worker (default: cores / workers)
    # workers given one core of a host they share may run a second thread while the others rest
    # (engine/model/kernels/core_share.py); off, or with threads_per_worker, the split is static
    share_cores: bool = True
    http_port: int | None = None  # the OpenAI-compatible HTTP edge in front of the router (None: none; 0: free port)
    tls: bool = False  # TLS on the public side too: the router's port and the HTTP edge (HTTPS)
    auth_token: str | None = None  # the router's public API then needs "authorization: Bearer <token>" (tenant default)
    tenant_tokens: dict[str, str] = field(default_factory=dict)  # tenant -> token, besides auth_token
    auth_token_file: str | None = None  # instead: the router and the edge read this token file (NAME TOKEN lines)
    insecure_internal: bool = False  # no identities, TLS or authorization between services (experiments only)


@dataclass
class Process:
    name: str
    module: str
    port: int
    args: list[str]
    metrics_port: int = 0
    popen: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen is not None else 0


class Stack(StackSecurity):
    def __init__(self, spec: StackSpec, log_dir: str | Path | None = None, inherit_output: bool = False,
                 tied: bool = False) -> None:
        """``tied``: the services stop when this process dies, even by SIGKILL (``pdserve up``; every launch must
        then come from the main thread, whose exit the kernel watches)."""
        self.spec = spec
        self.inherit_output = inherit_output
        self.tied = tied
        self.owns_log_dir = log_dir is None  # a directory of its own is removed at stop (logs, the stack's CA)
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="pdserve-logs-"))
        self.processes: list[Process] = []
        self._plan()

    # --- planning ---------------------------------------------------------------------------------------------------
    def _proc(self, name: str, module: str, args: list[str], port: int = 0) -> Process:
        port = port or free_port(self.spec.host)
        metrics_port = 0
        if self.spec.metrics:
            index = sum(p.module == module for p in self.processes)
            base = self.spec.metrics_base_port
            metrics_port = metrics_port_for(base, module, index) if base else free_port(self.spec.host)
        p = Process(name, module, port, args + ["--port", str(port), "--host", self.spec.host,
                                               "--metrics-port", str(metrics_port)], metrics_port)
        self.processes.append(p)
        return p

    def _plan(self) -> None:
        s = self.spec
        self._plan_security()
        model = (["--model", s.model] if s.model else []) + (["--kv-dtype", s.kv_dtype] if s.kv_dtype != "float32" else [])
        clock = ["--pace", s.pace, "--time-scale", str(s.time_scale)] + (["--deployment", s.deployment] if s.deployment else [])
        # (where this platform has memfd and SCM_RIGHTS: a kvstore asked for --kv-shm without them exits)
        shm = ["--kv-shm"] if s.kv_shm and not s.colocated and shm_available() else []
        kvstores = []
        if not s.colocated:
            for i in range(s.n_kvstore):
                args = ["--capacity-mb", str(s.kv_capacity_mb)] + shm + (["--enable-fault-injection"]
                                                                         if s.fault_injection else [])
                kvstores.append(self._proc(f"kvstore-{i}", "kvstore", args + self._flags("kvstore")
                                           + s.extra.get("kvstore", [])))
        kv_flag = ["--kvstore", ",".join(p.target for p in kvstores)]
        self.kvstores = kvstores
        self.prefills = [] if s.colocated else [
            self._proc(f"prefill-{i}", "prefill_server", model + kv_flag + shm + clock + self._flags("prefill_server")
                       + s.extra.get("prefill", []))
            for i in range(s.n_prefill)]
        self.decodes = [
            self._proc(f"decode-{i}", "decode_server",
                       model + kv_flag + shm + clock + ["--kv-blocks", str(s.kv_blocks)]
                       + self._flags("decode_server") + s.extra.get("decode", []))
            for i in range(s.n_decode)]
        self.router: Process | None = None
        if self.decodes:  # a stack without workers is just kvstores (for tests of the store alone)
            router_args = model + kv_flag + ["--decode", ",".join(p.target for p in self.decodes),
                                             "--prefill", ",".join(p.target for p in self.prefills),
                                             "--policy", s.policy] + (["--colocated"] if s.colocated else [])
            self.router = self._proc("router", "router", router_args + self._flags("router") + s.extra.get("router", []),
                                     s.router_port)
        self.edge: Process | None = None
        if self.router and s.http_port is not None:
            self.edge = self._proc("openai", "openai_server", ["--router", self.router.target]
                                   + self._flags("openai_server") + s.extra.get("openai_server", []), s.http_port)
        self.core_share = self._plan_core_share()

    # --- running ----------------------------------------------------------------------------------------------------
    @property
    def router_target(self) -> str:
        return self.router.target

    @property
    def workers(self) -> list[Process]:
        """The model workers, in the order of their core-share slots."""
        return self.prefills + self.decodes

    def _threads_per_worker(self) -> int:
        return self.spec.threads_per_worker or max(1, (os.cpu_count() or 1) // max(1, len(self.workers)))

    def _plan_core_share(self) -> Path | None:
        """The workers' shared file where they split this host's cores one each though each could use two; None
        where each has its cores or the spec fixes them."""
        if (not self.spec.share_cores or self.spec.threads_per_worker or len(self.workers) < 2
                or (os.cpu_count() or 1) < 2 or self._threads_per_worker() >= 2):
            return None
        path = self.log_dir / "core-share"
        create_core_share(path, len(self.workers))
        return path

    def _env(self, p: Process | None = None) -> dict[str, str]:
        env = dict(os.environ)
        threads = self._threads_per_worker()
        env.setdefault("OPENBLAS_NUM_THREADS", str(threads))
        env.setdefault("OMP_NUM_THREADS", str(threads))
        short_blas_spin(env)
        env["PYTHONUNBUFFERED"] = "1"
        env.pop(CORE_SHARE_ENV, None)
        slot = next((i for i, w in enumerate(self.workers) if w is p), None)
        if self.core_share is not None and slot is not None:
            env[CORE_SHARE_ENV] = f"{self.core_share}:{slot}"
        if self.tied:
            env[PARENT_ENV] = str(os.getpid())
        return env

    def start(self, timeout_s: float = 120.0) -> "Stack":
        """Start in dependency order (kvstores, workers, router), each stage SERVING before the next starts."""
        deadline = time.monotonic() + timeout_s
        try:
            for stage in self._stages():
                for p in stage:
                    self.launch(p)
                self.wait_ready(stage, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self, p: Process) -> None:
        env = self._env(p)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        if self.inherit_output:
            out = None
        else:
            p.log_path = self.log_dir / f"{p.name}.log"
            out = open(p.log_path, "a")
        p.popen = subprocess.Popen([sys.executable, "-m", f"pdserve.{p.module}", *p.args], env=env, stdout=out,
                                   stderr=subprocess.STDOUT if out else None, cwd=root)

    def kill(self, p: Process, sig: int = signal.SIGKILL, timeout_s: float = 120.0) -> int:
        """Stop one process with ``sig`` and wait for it (faults and rolling restarts); returns its exit code."""
        p.popen.send_signal(sig)
        return p.popen.wait(timeout=timeout_s)

    def restart(self, p: Process, sig: int = signal.SIGTERM, timeout_s: float = 120.0) -> None:
        """Stop one process (SIGTERM: it drains first) and start it again on the same port, SERVING on return."""
        self.kill(p, sig, timeout_s)
        self.launch(p)
        self.wait_ready([p], time.monotonic() + timeout_s)

    def _stages(self) -> list[list[Process]]:
        return [self.kvstores, self.prefills + self.decodes, [self.router] if self.router else [],
                [self.edge] if self.edge else []]

    def wait_ready(self, processes: list[Process], deadline: float) -> None:
        for p in processes:
            self._wait_one(p, deadline)

    def _wait_one(self, p: Process, deadline: float) -> None:
        what = f"{p.name} ready" if p is self.edge else f"{p.name} SERVING"
        wait_for(lambda: self.ready(p), max(0.0, deadline - time.monotonic()), what, p.popen, lambda: self.log_tail(p))

    def ready(self, p: Process, timeout_s: float = 1.0) -> bool:
        """One probe: grpc.health.v1 SERVING (as admin; the router with its public credentials), or for the HTTP edge
        /health answering 200 (it asks the router)."""
        if p is self.edge:
            return http_ok(f"{self.http_url}/health", timeout_s, cafile=self.tls_ca)
        credentials = self.credentials() if p is self.router else self.role_credentials("admin")
        return grpc_serving(p.target, credentials, timeout_s)

    @property
    def http_url(self) -> str:
        """Base URL of the OpenAI-compatible edge (``.../v1`` is the OpenAI base_url): HTTPS on a ``tls`` stack."""
        return f"{'https' if self.spec.tls else 'http'}://{self.edge.target}"

    def log_tail(self, p: Process, lines: int = 30) -> str:
        if p.log_path is None or not p.log_path.exists():
            return ""
        return "\n".join(p.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM in stages (router, then workers, then kvstores) so nothing talks to a stopped peer; kill leftovers."""
        for stage in reversed(self._stages()):
            stop_processes([p.popen for p in stage if p.popen is not None], grace_s)
        if self.owns_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def describe(self) -> str:
        lines = []
        scheme = "http" if self.spec.insecure_internal else "https"
        for p in self.processes:
            metrics = f"  metrics {scheme}://127.0.0.1:{p.metrics_port}/metrics" if p.metrics_port else ""
            lines.append(f"{p.name:<12} {p.target}{metrics}")
        return "\n".join(lines)

    def __enter__(self) -> "Stack":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
