"""A plan as NVIDIA Dynamo's DynamoGraphDeployment: its frontend and one SGLang worker service per role.

The shape follows Dynamo's SGLang disaggregated example (ai-dynamo/dynamo, components/backends/sglang/deploy/
disagg.yaml): ``Frontend`` (``dynamo.frontend``), ``SGLangPrefillWorker`` (``dynamo.sglang.worker``) and
``SGLangDecodeWorker`` (``dynamo.sglang.decode_worker``), each worker taking SGLang's own server flags (the same as
sim/emit_engines.py emits, checked against SGLang v0.5.3's parser) with NIXL, Dynamo's KV transfer. An instance over
several nodes is one replica with ``multinode.nodeCount``; GPUs per pod are the instance's GPUs per node.
"""

from __future__ import annotations

from pdserve.sim.emit import Shape, model_repo, shapes
from pdserve.sim.emit_engines import sglang_server_args
from pdserve.sim.emit_yaml import dump
from pdserve.sim.plan_file import Plan

NAMESPACE = "pdserve-plan"
IMAGE = "nvcr.io/nvidia/ai-dynamo/sglang-runtime:${DYNAMO_VERSION}"
SERVICES = {"prefill": ("SGLangPrefillWorker", "dynamo.sglang.worker"),
            "decode": ("SGLangDecodeWorker", "dynamo.sglang.decode_worker"),
            "both": ("SGLangDecodeWorker", "dynamo.sglang.worker")}
DROPPED = {"--host", "--port", "--disaggregation-bootstrap-port", "--enable-metrics"}  # Dynamo owns these


def worker_args(plan: Plan, s: Shape) -> list[str]:
    args = sglang_server_args(plan, s, 0)[3:]  # without "python -m sglang.launch_server"
    out, i = [], 0
    while i < len(args):
        flag = args[i]
        takes = i + 1 < len(args) and not args[i + 1].startswith("--")
        if flag in DROPPED or flag in ("--nnodes", "--node-rank", "--dist-init-addr"):
            i += 2 if takes else 1
            continue
        out += args[i:i + (2 if takes else 1)]
        i += 2 if takes else 1
    if s.role != "both":
        out[out.index("--disaggregation-transfer-backend") + 1] = "nixl"
    return out + ["--served-model-name", model_repo(plan), "--skip-tokenizer-init"]


def _worker(plan: Plan, s: Shape) -> dict:
    name, module = SERVICES[s.role]
    gpus_per_pod = str(min(s.gpus, plan.deployment.gpus_per_node))
    svc = {"envFromSecret": "hf-token-secret", "dynamoNamespace": NAMESPACE, "componentType": "worker",
           "replicas": s.count,
           "resources": {"requests": {"gpu": gpus_per_pod}, "limits": {"gpu": gpus_per_pod}},
           "extraPodSpec": {"mainContainer": {"image": IMAGE, "workingDir": "/workspace/components/backends/sglang",
                                              "args": ["python3", "-m", module] + worker_args(plan, s)}}}
    if s.nodes > 1:
        svc["multinode"] = {"nodeCount": s.nodes}
    return {name: svc}


def dynamo(plan: Plan) -> dict[str, str]:
    services = {"Frontend": {"dynamoNamespace": NAMESPACE, "componentType": "main", "replicas": 1,
                             "extraPodSpec": {"mainContainer": {
                                 "image": IMAGE, "workingDir": "/workspace/components/backends/sglang",
                                 "args": ["python3", "-m", "dynamo.frontend", "--http-port=8000"]}}}}
    for s in shapes(plan):
        services.update(_worker(plan, s))
    doc = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
           "metadata": {"name": NAMESPACE}, "spec": {"services": services}}
    p = plan.predicted
    head = (f"# {plan.label}, planned by pdserve plan at {plan.request_rate:g} req/s (predicted mean TTFT "
            f"{p.get('mean_ttft_ms') or 0:.0f} ms, mean TPOT {p.get('mean_tpot_ms') or 0:.1f} ms).\n"
            "# Set the image's ${DYNAMO_VERSION} and create the hf-token-secret before applying.\n")
    return {"dynamo-graph.yaml": head + dump(doc)}
