"""deploy/Dockerfile and deploy/docker-compose.yml, run for real with podman: build the image once, bring the stack
up (its identities made by the one-shot service, the internal plane secured), send requests through the router's and
the edge's published ports over TLS (verified with the stack's CA from the identities volume) with the token, check
that the router found both replicas of each worker, that Prometheus scrapes every target over HTTPS, and that every
published port is on loopback; then tear everything down."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import grpc
import httpx
import pytest

from pdserve.client.client import PdserveClient
from pdserve.common.readiness import http_ok
from pdserve.launcher.ports import free_port
from pdserve.v1 import router_pb2, router_pb2_grpc
from tests.containers import IMAGE, build_image, compose_command, podman_env, run
from tests.helpers import wait_until
from tests.prom import query

COMPOSE_FILE = "deploy/docker-compose.yml"
SERVICES = ["identities", "kvstore", "prefill", "decode", "router", "openai", "prometheus"]  # no Grafana image here
TOKEN = "compose-test-token-1"


@pytest.fixture(scope="session")
def image_env(tmp_path_factory):
    """The podman environment with deploy/Dockerfile built (once per test session); the image is removed after."""
    env = podman_env(tmp_path_factory.mktemp("podman"))
    build_image(env)
    yield env
    run(["podman", "rmi", "-f", IMAGE], env, check=False)


def router_ready(target: str, creds: grpc.ChannelCredentials) -> bool:
    try:
        with grpc.secure_channel(target, creds) as ch:
            models = router_pb2_grpc.RouterStub(ch).ListModels(router_pb2.ListModelsRequest(), timeout=3,
                                                               metadata=(("authorization", f"Bearer {TOKEN}"),))
            return bool(models.models)
    except grpc.RpcError:
        return False


def answers(router: str, creds: grpc.ChannelCredentials) -> bool:
    try:
        with PdserveClient(router, credentials=creds, token=TOKEN) as client:
            return bool(client.complete(messages=[{"role": "user", "content": "Hi"}], max_tokens=2).finish_reason)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return False
        raise


def test_image_runs_as_non_root_with_the_model_baked_in_and_a_grpc_health_check(image_env):
    inspect = run(["podman", "image", "inspect", IMAGE, "--format",
                   "{{.Config.User}}|{{json .Config.Healthcheck}}|{{json .Config.Entrypoint}}"], image_env).stdout
    user, health, entrypoint = inspect.strip().split("|")
    assert user == "10001" and "pdserve.common.healthcheck" in health and entrypoint == '["python","-m"]'
    out = run(["podman", "run", "--rm", "--entrypoint", "python", IMAGE, "-c",
               "import os; from pdserve.engine.model.default_model import default_model_path as p; print(os.getuid(), p())"],
              image_env).stdout
    uid, model = out.split()
    assert uid == "10001" and model.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def test_compose_stack_serves_and_is_scraped(image_env):
    env = dict(image_env, PDSERVE_ROUTER_PORT=str(free_port()), PROMETHEUS_PORT=str(free_port()),
               PDSERVE_HTTP_PORT=str(free_port()), PDSERVE_AUTH_TOKEN=TOKEN)
    project = f"pdserve-test-{os.getpid()}"
    compose = compose_command() + ["-p", project, "-f", COMPOSE_FILE]
    router = f"127.0.0.1:{env['PDSERVE_ROUTER_PORT']}"
    prometheus = f"http://127.0.0.1:{env['PROMETHEUS_PORT']}"
    try:
        run(compose + ["up", "-d", "--no-build", *SERVICES], env, timeout=600)
        volume = run(["podman", "volume", "inspect", f"{project}_identities", "--format", "{{.Mountpoint}}"],
                     env).stdout.strip()
        wait_until(lambda: (Path(volume) / "ca.crt").exists(), 300, "the stack's CA in the identities volume")
        ca = (Path(volume) / "ca.crt").read_bytes()
        creds = grpc.ssl_channel_credentials(ca)
        with pytest.raises(grpc.RpcError):  # plaintext is refused: tokens never travel in clear
            with grpc.insecure_channel(router) as ch:
                router_pb2_grpc.RouterStub(ch).ListModels(router_pb2.ListModelsRequest(), timeout=10)
        wait_until(lambda: router_ready(router, creds), 300, "the router answers on its published port")
        wait_until(lambda: answers(router, creds), 300, "a request through the router (workers loading the model)")
        with PdserveClient(router, credentials=creds) as client:  # no token: refused
            with pytest.raises(grpc.RpcError) as err:
                client.list_models()
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with PdserveClient(router, credentials=creds, token=TOKEN) as client:
            replies = [client.complete(messages=[{"role": "user", "content": f"Count to {n}"}], max_tokens=8,
                                       temperature=0) for n in range(2, 8)]
        assert all(r.usage.completion_tokens >= 1 and r.finish_reason for r in replies)
        edge = f"https://127.0.0.1:{env['PDSERVE_HTTP_PORT']}"
        verify = ssl.create_default_context(cadata=ca.decode())
        wait_until(lambda: http_ok(f"{edge}/health", 5.0, str(Path(volume) / "ca.crt")), 120,
                   "the edge answers on its published port")
        assert httpx.get(f"{edge}/v1/models", timeout=30, verify=verify).status_code == 401
        assert httpx.get(f"{edge}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30,
                         verify=verify).json()["data"]
        # every port is published on loopback only (PDSERVE_PUBLISH_HOST unset)
        published = run(["podman", "ps", "--filter", f"label=io.podman.compose.project={project}", "--format",
                         "{{.Names}} {{.Ports}}"], env).stdout
        exposed = {line.split()[0]: line for line in published.splitlines() if "->" in line}
        assert exposed and all("127.0.0.1:" in line and "0.0.0.0:" not in line for line in exposed.values())
        # Prometheus found every replica by DNS and scrapes them all, over HTTPS as its own identity
        wait_until(lambda: len(query(prometheus, 'up{job=~"pdserve.*"} == 1')) == 7, 120,
                   "7 targets up (router, edge, kvstore, 2 prefill, 2 decode)")
        up = query(prometheus, 'up{job=~"pdserve.*"}')
        assert sorted(r["metric"]["job"] for r in up) == sorted(
            ["pdserve-router", "pdserve-openai", "pdserve-kvstore"] + ["pdserve-prefill"] * 2 + ["pdserve-decode"] * 2)
        # the router found both replicas of each worker service behind one DNS name
        decisions = query(prometheus, "pdserve_router_routing_decisions_total")
        workers = {(r["metric"]["phase"], r["metric"]["worker"]) for r in decisions}
        assert len({w for p, w in workers if p == "prefill"}) == 2 and len({w for p, w in workers if p == "decode"}) == 2
        # scaled up: the router re-resolves "decode" and Prometheus's DNS discovery finds the third replica
        run(compose + ["up", "-d", "--no-build", "--scale", "decode=3", "decode"], env, timeout=300)
        wait_until(lambda: len(query(prometheus, 'up{job="pdserve-decode"} == 1')) == 3, 180,
                   "3 decode targets up after scaling")
        wait_until(lambda: run(compose + ["logs", "router"], env, check=False).stdout.count(":50071 joined") == 3,
                   60, "the router saw the third decode replica join")
        # the image's health check passes inside running containers: the router's public port, a worker's mutual TLS
        for service in ("router", "decode", "openai"):
            container = run(["podman", "ps", "-q", "--filter", f"label=io.podman.compose.project={project}",
                             "--filter", f"label=com.docker.compose.service={service}"], env).stdout.split()
            assert container, service
            assert run(["podman", "healthcheck", "run", container[0]], env, check=False).returncode == 0, service
    except BaseException:
        for service in SERVICES:
            print(run(compose + ["logs", "--tail", "30", service], env, check=False).stdout[-3000:])
        raise
    finally:
        run(compose + ["down", "-v", "-t", "10"], env, check=False, timeout=300)
        # compose down knows the file's replica count, not a --scale beyond it, and a container another depends on
        # (kvstore, identities) is not removed while the extra replica stands: remove the rest by label, with what
        # depends on each (podman removes the listed ones in its own order and stops at a dependency)
        label = f"label=io.podman.compose.project={project}"
        extra = run(["podman", "ps", "-aq", "--filter", label], env).stdout.split()
        if extra:
            run(["podman", "rm", "-f", "-t", "10", "--depend", *extra], env, check=False)
        run(["podman", "network", "rm", "-f", f"{project}_default"], env, check=False)
        run(["podman", "volume", "rm", "-f", f"{project}_identities", f"{project}_prometheus-data"], env, check=False)
        left = run(["podman", "ps", "-aq", "--filter", label], env).stdout
        assert not left.strip(), f"containers left behind: {left}"
