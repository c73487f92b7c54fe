"""A plan as pdserve's own cluster, emulated: the planned prefill and decode workers on the synthetic backend, paced
at their planned deployment's modeled clock, behind the router, with the kvstore and metrics, secured as the
defaults are (mutual TLS between roles, bearer tokens at the edge: deploy/k8s, deploy/docker-compose.yml).

``k8s``: a kustomize directory (``kubectl apply -k DIR``): deploy/k8s's manifests with the prefill and decode
Deployments set to the plan's instance counts and emulation settings, without the decode autoscaler (a plan fixes the
counts). ``compose``: an override of deploy/docker-compose.yml (``docker compose -f deploy/docker-compose.yml -f
DIR/docker-compose.plan.yml up``). Router, kvstore, edge, Prometheus and Grafana are the defaults'.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.sim.emit_yaml import dump
from pdserve.sim.plan_file import Plan, deployment_dict

BASE = Path(__file__).resolve().parents[1] / "deploy"
KEPT = ("namespace.yaml", "kvstore.yaml", "router.yaml", "networkpolicy.yaml")
ANCHOR = '            - {name: PDSERVE_KVSTORE, value: "kvstore:50051"}\n'
DEFAULT_TIME_SCALE = 1.0


def deployment_flag(plan: Plan) -> str:
    """The plan's deployment as the workers' ``--deployment`` KEY=V list (every key set, so no default can differ;
    an empty string is the default already)."""
    values = deployment_dict(plan.deployment)
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in values.items() if v != "")


def worker_env(plan: Plan, time_scale: float = DEFAULT_TIME_SCALE) -> dict[str, str]:
    """What turns a worker into an emulated instance of the plan (each flag's PDSERVE_* variable)."""
    env = {"PDSERVE_MODEL": "synthetic", "PDSERVE_PACE": "realtime", "PDSERVE_TIME_SCALE": f"{time_scale:g}",
           "PDSERVE_DEPLOYMENT": deployment_flag(plan)}
    for f in fields(SchedulerOverrides):
        value = getattr(plan.overrides, f.name)
        if value is not None:
            env["PDSERVE_" + f.name.upper()] = str(value)
    return env


def _roles(plan: Plan) -> dict[str, int]:
    """Service name -> replicas. Colocated plans run decode workers that prefill locally."""
    return {"decode": plan.n_decode} if plan.colocated else {"prefill": plan.n_prefill, "decode": plan.n_decode}


def _base(name: str) -> str:
    path = BASE / "k8s" / name
    if not path.exists():
        raise ValueError(f"emit: {path} not found: k8s and compose are emitted from a pdserve checkout's deploy/")
    return path.read_text()


def _k8s_worker(role: str, replicas: int, env: dict[str, str]) -> str:
    text = _base(f"{role}.yaml")
    if ANCHOR not in text or "\n  replicas: 2\n" not in text:
        raise ValueError(f"emit k8s: deploy/k8s/{role}.yaml no longer has the lines the emitter sets")
    lines = "".join(f"            - {{name: {k}, value: \"{v}\"}}\n" for k, v in env.items())
    return text.replace("\n  replicas: 2\n", f"\n  replicas: {replicas}\n").replace(ANCHOR, ANCHOR + lines)


def k8s(plan: Plan, time_scale: float = DEFAULT_TIME_SCALE) -> dict[str, str]:
    env = worker_env(plan, time_scale)
    roles = _roles(plan)
    files = {name: _base(name) for name in KEPT}
    for role, replicas in roles.items():
        files[f"{role}.yaml"] = _k8s_worker(role, replicas, dict(env, **({"PDSERVE_KV_BUDGET": "modeled"}
                                                                        if role == "decode" else {})))
    if plan.colocated:  # decode workers prefill locally; the router sends them whole requests
        files["router.yaml"] = files["router.yaml"].replace(ANCHOR, ANCHOR + '            - {name: '
                                                            'PDSERVE_COLOCATED, value: "1"}\n', 1)
    resources = [n for n in ("namespace.yaml", "kvstore.yaml", "prefill.yaml", "decode.yaml", "router.yaml",
                             "networkpolicy.yaml") if n in files]
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "namespace": "pdserve",
                     "labels": [{"pairs": {"app.kubernetes.io/part-of": "pdserve",
                                           "pdserve.io/plan": _label(plan)}}],
                     "resources": resources,
                     "images": [{"name": "localhost/pdserve", "newName": "localhost/pdserve", "newTag": "latest"}]}
    files["kustomization.yaml"] = (f"# {plan.label}, emulated (synthetic backend paced at the modeled clock x "
                                   f"{time_scale:g}): kubectl apply -k .\n" + dump(kustomization))
    return files


def _label(plan: Plan) -> str:
    d = plan.deployment
    mode = f"{plan.n_decode}c" if plan.colocated else f"{plan.n_prefill}p{plan.n_decode}d"
    return f"{mode}-{d.gpus}x{d.hardware}".lower()


def compose(plan: Plan, time_scale: float = DEFAULT_TIME_SCALE) -> dict[str, str]:
    env = worker_env(plan, time_scale)
    services = {}
    for role, replicas in _roles(plan).items():
        extra = {"PDSERVE_KV_BUDGET": "modeled"} if role == "decode" else {}
        services[role] = {"deploy": {"mode": "replicated", "replicas": replicas}, "environment": dict(env, **extra)}
    if plan.colocated:
        services["prefill"] = {"deploy": {"mode": "replicated", "replicas": 0}}
        services["router"] = {"environment": {"PDSERVE_COLOCATED": "1"}}
    head = (f"# {plan.label}, emulated: the synthetic backend paced at the modeled clock x {time_scale:g}.\n"
            "#   docker compose -f deploy/docker-compose.yml -f docker-compose.plan.yml up -d --build\n"
            "# Everything else (identities, mutual TLS, tokens, Prometheus, Grafana) is deploy/docker-compose.yml's.\n")
    return {"docker-compose.plan.yml": head + dump({"services": services})}
