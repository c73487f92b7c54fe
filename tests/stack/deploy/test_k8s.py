"""deploy/k8s: every manifest valid against the Kubernetes schemas (kubernetes-validate, strict: no unknown fields),
the kustomization complete, and every image, module, flag, port and probe one that exists."""

from __future__ import annotations

import importlib
import os

import pytest

from tests import REPO_ROOT

yaml = pytest.importorskip("yaml", reason="PyYAML comes with the test extra (podman-compose)")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[test]'")

K8S = REPO_ROOT / "deploy" / "k8s"
COMPOSE = K8S.parent / "docker-compose.yml"
KUBERNETES_VERSION = "1.30.0"
SERVICE_MODULES = {"pdserve.kvstore": "pdserve.kvstore.main", "pdserve.prefill_server": "pdserve.prefill_server.server",
                   "pdserve.decode_server": "pdserve.decode_server.server", "pdserve.router": "pdserve.router.server"}


def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def resources() -> list[dict]:
    docs = []
    for name in kustomization()["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return docs


def test_kustomization_lists_every_manifest():
    listed = set(kustomization()["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "prometheus-adapter-rules.yaml"}
    assert listed == present


def test_every_manifest_is_valid_against_the_kubernetes_schemas():
    docs = resources()
    assert {d["kind"] for d in docs} == {"Namespace", "Service", "Deployment", "HorizontalPodAutoscaler",
                                         "NetworkPolicy"}
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)  # raises ValidationError naming the field


def flag_env_vars(module: str) -> set[str]:
    """The PDSERVE_* variables a service's flags read (FlagParser attaches one to every long option)."""
    parser = importlib.import_module(SERVICE_MODULES[module]).build_parser()
    return {a.env_var for a in parser._actions if getattr(a, "env_var", None)}


def test_deployments_name_images_modules_flags_ports_and_probes_that_exist():
    compose_image = yaml.safe_load(COMPOSE.read_text())["x-pdserve"]["image"]
    image_names = {i["name"] for i in kustomization()["images"]}
    services = {d["metadata"]["name"]: d for d in resources() if d["kind"] == "Service"}
    deployments = [d for d in resources() if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"kvstore", "prefill", "decode", "router"}
    for dep in deployments:
        pod = dep["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        assert container["image"].rsplit(":", 1)[0] in image_names and container["image"] == compose_image
        (module,) = container["args"]
        env = {e["name"]: e["value"] for e in container["env"]}
        unknown = {k for k in env if k.startswith("PDSERVE_")} - flag_env_vars(module)
        assert not unknown, f"{dep['metadata']['name']}: no such flag for {module}: {unknown}"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["grpc"] == int(env["PDSERVE_PORT"]) and ports["metrics"] == int(env["PDSERVE_METRICS_PORT"])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):  # the health check as the pod's identity
            live = ["--live"] if probe == "livenessProbe" and dep["metadata"]["name"] == "router" else []  # NOT_SERVING: alive
            assert container[probe]["exec"]["command"] == ["python", "-m", "pdserve.common.healthcheck", *live], probe
        # its own identity (and the KV key), mounted where PDSERVE_IDENTITY points
        name = dep["metadata"]["name"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["identity"] == env["PDSERVE_IDENTITY"]
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "identity"]
        assert {s["secret"]["name"] for s in volume["projected"]["sources"]} == {f"pdserve-{name}-identity",
                                                                                 "pdserve-kv-key"}
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
        assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
        assert pod["spec"]["securityContext"]["runAsUser"] == 10001  # the image's non-root user
        svc = services[dep["metadata"]["name"]]
        assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(ports)
    # the workers the router discovers are headless Services, whose DNS name resolves to every ready pod
    router_env = {e["name"]: e["value"] for d in deployments if d["metadata"]["name"] == "router"
                  for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
    for flag in ("PDSERVE_PREFILL", "PDSERVE_DECODE"):
        name, port = router_env[flag].split(":")
        assert services[name]["spec"]["clusterIP"] == "None"
        assert int(port) in {p["port"] for p in services[name]["spec"]["ports"]}


def test_autoscalers_scale_deployments_on_metrics_the_workers_export():
    from pdserve.decode_server import metrics as decode
    from pdserve.prefill_server import metrics as prefill

    exported = {m._name for m in (prefill.WAITING_TOKENS, decode.KV_USAGE, decode.WAITING)}
    names = {d["metadata"]["name"] for d in resources() if d["kind"] == "Deployment"}
    for hpa in (d for d in resources() if d["kind"] == "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["name"] in names
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Pods":
                assert metric["pods"]["metric"]["name"] in exported


def test_network_policy_denies_by_default_and_allows_each_call_the_stack_makes():
    policies = {d["metadata"]["name"]: d["spec"] for d in resources() if d["kind"] == "NetworkPolicy"}
    deny = policies.pop("default-deny")
    assert deny["podSelector"] == {} and set(deny["policyTypes"]) == {"Ingress", "Egress"} and "ingress" not in deny

    def allowed_in(role: str) -> set[tuple[str, int]]:
        spec = policies[role]
        return {(peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"], port["port"])
                for rule in spec.get("ingress", []) for peer in rule.get("from", []) for port in rule["ports"]}
    assert allowed_in("prefill") == {("router", 50061)} and allowed_in("decode") == {("router", 50071)}
    assert allowed_in("kvstore") == {(r, 50051) for r in ("prefill", "decode", "router")}
    assert policies["router"]["ingress"] == [{"ports": [{"port": 50050, "protocol": "TCP"}]}]  # public, no peers


def test_the_identities_command_makes_the_secrets_the_deployments_mount(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "pdserve.cli.main", "identities", "--out", str(tmp_path / "ids"),
                          "--roles", "kvstore,prefill,decode,router,prometheus", "--token-file-for", str(os.getgid()),
                          "--k8s"], capture_output=True, text=True, timeout=120, check=True)
    secrets = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out.stdout) if d}
    for doc in secrets.values():
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    mounted = {s["secret"]["name"] for d in resources() if d["kind"] == "Deployment"
               for v in d["spec"]["template"]["spec"]["volumes"] for s in v.get("projected", {}).get("sources", [])}
    mounted |= {v["secret"]["secretName"] for d in resources() if d["kind"] == "Deployment"
                for v in d["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    assert mounted <= set(secrets)
    assert set(secrets["pdserve-router-identity"]["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert "kv-mac.key" in secrets["pdserve-kv-key"]["data"] and "tokens" in secrets["pdserve-tokens"]["data"]


def test_pods_run_hardened_and_the_public_side_serves_tls():
    """Pod Security "restricted" and more: seccomp, a read-only root with a writable /tmp, no service account token,
    CPU and memory limits; the router serves TLS; metrics only from the monitoring namespace."""
    docs = resources()
    namespace = next(d for d in docs if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for d in (d for d in docs if d["kind"] == "Deployment"):
        pod = d["spec"]["template"]["spec"]
        name = d["metadata"]["name"]
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        tmp = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert {"cpu", "memory"} <= set(c["resources"]["limits"]), name
            assert any(m["mountPath"] == "/tmp" and m["name"] in tmp for m in c["volumeMounts"]), name
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            if name == "router":
                assert env["PDSERVE_TLS_CERT"] and env["PDSERVE_TLS_KEY"]
    metrics = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "dns-and-metrics")
    for rule in metrics["spec"]["ingress"]:
        for peer in rule["from"]:
            assert peer["namespaceSelector"].get("matchLabels"), "metrics open to every namespace"


def test_compose_containers_are_hardened_and_publish_on_loopback():
    compose = yaml.safe_load(COMPOSE.read_text())
    anchor = compose["x-pdserve"]
    assert anchor["read_only"] and anchor["cap_drop"] == ["ALL"] and anchor["mem_limit"]
    assert "no-new-privileges:true" in anchor["security_opt"] and any(t.startswith("/tmp") for t in anchor["tmpfs"])
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert port.startswith(("127.0.0.1:", "${PDSERVE_PUBLISH_HOST:-127.0.0.1}:")), (name, port)
    for name in ("router", "openai"):
        env = compose["services"][name]["environment"]
        assert env["PDSERVE_TLS_CERT"] and env["PDSERVE_TLS_KEY"], name
    assert compose["services"]["grafana"]["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
