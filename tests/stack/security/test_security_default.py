"""Secure by default: ``pdserve up`` with no flag runs the internal plane with identities (a worker's port refuses
plaintext), a service started bare refuses to run without an identity, and ``--insecure-internal`` turns it all
off with a loud warning."""

import signal
import subprocess
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pdserve.common.readiness import grpc_serving
from tests import REPO_ROOT
from tests.helpers import pdserve_up

ROOT = REPO_ROOT


def ports(lines: list[str]) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in lines if line.split() and line.split()[0] in
            ("kvstore-0", "prefill-0", "decode-0", "router")}


def test_pdserve_up_secures_the_internal_plane_with_no_flag(tiny_model_path):
    proc, lines = pdserve_up(["--model", str(tiny_model_path), "--port", "0"], until="try:")
    try:
        text = "".join(lines)
        assert "internal plane: mutual TLS, an identity per role" in text and "WARNING" not in text
        targets = ports(lines)
        for name in ("kvstore-0", "prefill-0", "decode-0"):
            assert not grpc_serving(targets[name]), name  # plaintext: refused
        with grpc.insecure_channel(targets["router"]) as ch:  # the public port (no --tls): plaintext, as documented
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_insecure_internal_is_named_and_warned_about(tiny_model_path):
    proc, lines = pdserve_up(["--model", str(tiny_model_path), "--port", "0", "--insecure-internal"], until="try:")
    try:
        assert any(line.startswith("WARNING: --insecure-internal: the internal plane is NOT secured") for line in lines)
        assert grpc_serving(ports(lines)["kvstore-0"])  # plaintext answers
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_a_service_without_an_identity_refuses_to_start():
    for module in ("kvstore", "prefill_server", "decode_server", "router", "openai_server"):
        out = subprocess.run([sys.executable, "-m", f"pdserve.{module}", "--port", "0"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        assert out.returncode != 0 and "--identity: required" in out.stderr and "Traceback" not in out.stderr, module


def test_an_identity_of_another_role_is_refused(tmp_path):
    from pdserve.common.certs import make_identities

    dirs = make_identities(tmp_path, ["prefill"])
    out = subprocess.run([sys.executable, "-m", "pdserve.kvstore", "--port", "0", "--identity", str(dirs["prefill"])],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode != 0 and "is a prefill identity; this service is kvstore" in out.stderr
