"""A ``pdserve up --tls`` stack serves the router's public port with the public certificate, not the router's role
identity (whose key is also its client identity on the internal plane)."""

from __future__ import annotations

from types import SimpleNamespace

from pdserve.common.certs import PUBLIC_DIR
from pdserve.launcher.identities import StackSecurity


def test_the_routers_public_port_serves_the_public_certificate(tmp_path):
    stack = StackSecurity()
    stack.spec = SimpleNamespace(insecure_internal=False, tls=True, fault_injection=False, auth_token_file=None,
                                 auth_token=None, tenant_tokens={})
    stack.log_dir = tmp_path
    stack._plan_security()
    flags = stack._flags("router")
    public = tmp_path / "identities" / PUBLIC_DIR
    assert flags[flags.index("--tls-cert") + 1] == str(public / "tls.crt")
    assert flags[flags.index("--tls-key") + 1] == str(public / "tls.key")
    assert flags[flags.index("--identity") + 1] == str(tmp_path / "identities" / "router")  # internal: the role's
    edge = stack._flags("openai_server")
    assert edge[edge.index("--tls-cert") + 1] == str(tmp_path / "identities" / "openai" / "tls.crt")
