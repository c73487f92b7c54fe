"""The security of a stack the launcher starts: a CA made at start and one certificate per role, in the stack's
directory (``common/certs.py``), the token file, the flags each process gets, and credentials for whoever acts as
a role on the stack (the launcher's readiness probes as ``admin``, Prometheus as ``prometheus``, tests and
benchmarks as the role whose calls they make).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from pdserve.common.certs import PUBLIC_DIR, STACK_ROLES, make_identities
from pdserve.common.identity import CERT_FILE, KEY_FILE, Identity
from pdserve.common.scrape import Samples, scrape

MODULE_ROLES = {"kvstore": "kvstore", "prefill_server": "prefill", "decode_server": "decode", "router": "router",
                "openai_server": "openai"}


@dataclass
class StackIdentities:
    directory: Path
    dirs: dict[str, Path]
    _loaded: dict[str, Identity] = field(default_factory=dict)

    @classmethod
    def make(cls, directory: str | Path, test_identity: bool = False) -> StackIdentities:
        """A fresh set for one stack; ``test_identity``: also the identity that may inject faults."""
        roles = STACK_ROLES + (("test",) if test_identity else ())
        return cls(Path(directory), make_identities(directory, roles))

    def flags(self, role: str) -> list[str]:
        return ["--identity", str(self.dirs[role])]

    def identity(self, role: str) -> Identity:
        if role not in self._loaded:
            self._loaded[role] = Identity.load(self.dirs[role])
        return self._loaded[role]

    def credentials(self, role: str) -> grpc.ChannelCredentials:
        return self.identity(role).channel_credentials

    @property
    def ca(self) -> str:
        """The stack CA's certificate (what a client of the router's TLS port verifies it with)."""
        return self.identity("admin").ca_path


class StackSecurity:
    """The security half of ``launcher.stack.Stack`` (its ``spec``, ``log_dir`` and ``kvstores``): planned before
    the processes, read by the tests and tools that call into the stack."""

    def _plan_security(self) -> None:
        """A fresh CA and an identity per role (unless insecure_internal without public TLS), and the token file."""
        s = self.spec
        needed = not s.insecure_internal or s.tls
        self.identities = StackIdentities.make(self.log_dir / "identities", s.fault_injection) if needed else None
        self.token_file: Path | None = Path(s.auth_token_file) if s.auth_token_file else None
        lines = ([s.auth_token] if s.auth_token else []) + [f"{name} {token}" for name, token in s.tenant_tokens.items()]
        if lines and self.token_file is None:
            self.token_file = self.log_dir / "auth-tokens"
            self.token_file.write_text("\n".join(lines) + "\n")
            self.token_file.chmod(0o600)

    def _flags(self, module: str) -> list[str]:
        """A process's security flags: its identity, and for the public side TLS and the token file."""
        role = MODULE_ROLES[module]
        out = ["--insecure-internal"] if self.spec.insecure_internal else self.identities.flags(role)
        if self.spec.tls and module == "router":  # the public port serves its own certificate, not the role's
            public = self.identities.directory / PUBLIC_DIR
            out += ["--tls-cert", str(public / CERT_FILE), "--tls-key", str(public / KEY_FILE)]
        elif self.spec.tls and module == "openai_server":
            ident = self.identities.identity(role)
            out += ["--tls-cert", ident.cert_path, "--tls-key", ident.key_path, "--tls-ca", ident.ca_path]
        if self.token_file is not None and module in ("router", "openai_server"):
            out += ["--auth-token-file", str(self.token_file)]
        return out

    @property
    def tls_ca(self) -> str | None:
        """The CA that verifies the router's TLS port and the HTTPS edge (a ``spec.tls`` stack); None otherwise."""
        return self.identities.ca if self.spec.tls else None

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Client credentials for the router's public port: None without TLS (plaintext)."""
        return grpc.ssl_channel_credentials(Path(self.tls_ca).read_bytes()) if self.spec.tls else None

    def role_credentials(self, role: str) -> grpc.ChannelCredentials | None:
        """Credentials to call an internal service as ``role`` (None: the stack is insecure_internal)."""
        return None if self.spec.insecure_internal else self.identities.credentials(role)

    def channel(self, target, role: str) -> grpc.Channel:
        """A blocking channel to an internal service (a launcher Process, or a target), calling as ``role``."""
        target = getattr(target, "target", target)
        creds = self.role_credentials(role)
        return grpc.secure_channel(target, creds) if creds else grpc.insecure_channel(target)

    def aio_channel(self, target, role: str) -> grpc.aio.Channel:
        target = getattr(target, "target", target)
        creds = self.role_credentials(role)
        return grpc.aio.secure_channel(target, creds) if creds else grpc.aio.insecure_channel(target)

    def kv_client(self, role: str = "prefill", shm: bool = False, targets: list[str] | None = None):
        """A KVStoreClient for this stack's kvstores (or ``targets``), calling as ``role``."""
        from pdserve.kvstore.client import KVStoreClient

        identity = None if self.spec.insecure_internal else self.identities.identity(role)
        return KVStoreClient(targets or [p.target for p in self.kvstores], shm=shm, identity=identity)

    def scrape(self, p) -> Samples:
        """Every sample of a process's /metrics page (over HTTPS as Prometheus would, unless insecure_internal)."""
        if self.spec.insecure_internal:
            return scrape(p.metrics_port, self.spec.host)
        return scrape(p.metrics_port, self.spec.host, ssl_context=self.identities.identity("prometheus")
                      .client_ssl_context())

