"""A plan as the real engines' launch commands: SGLang v0.5.3 with its router, vLLM v0.11.0 with NIXL.

Every flag is one the named release's argument parser accepts (tests/unit/sim/engine_flags.py holds those parsers'
flag lists, with their sources). Mapping of pdserve's deployment keys:

- SGLang: ``--tp-size`` is the instance's GPUs; attention replicas beyond one are DP attention (``--enable-dp-attention
  --dp-size``: attention TP = tp-size / dp-size); ``--ep-size`` the expert-parallel degree (with DP attention over
  DeepEP, normal mode for prefill, low-latency for decode, as SGLang's large-scale EP recipe runs it); the memory
  fraction, chunk and running-request cap the plan simulated; an instance over several nodes runs one command per
  node (``--nnodes``, ``--node-rank``, ``--dist-init-addr``). The P/D pair hands KV over with mooncake (SGLang's default
  transfer backend); ``sglang_router.launch_router --pd-disaggregation`` routes.
- vLLM: ``--tensor-parallel-size`` the attention TP, ``--data-parallel-size`` the attention replicas,
  ``--enable-expert-parallel`` when experts are spread (vLLM's EP is then TP x DP); the NIXL connector in both roles
  (``kv_both``); vLLM's own P/D proxy (its repository's toy_proxy_server.py) routes.

Host addresses are shell variables (``PREFILL_0_HOST``, ...) the operator sets; nothing here is guessed.
"""

from __future__ import annotations

import json
import shlex

from pdserve.engine.sched.profiles import scheduling_profile
from pdserve.sim.emit import Shape, model_repo, shapes
from pdserve.sim.plan_file import Plan

SGLANG_RELEASE = "SGLang v0.5.3 (sglang 0.5.3, sglang-router 0.2.0)"
VLLM_RELEASE = "vLLM v0.11.0"
SGLANG_PORT, BOOTSTRAP_PORT, DIST_PORT, ROUTER_PORT = 30000, 8998, 5757, 8000
VLLM_PORT, VLLM_DP_RPC_PORT, NIXL_PORT, PROXY_PORT = 8100, 13345, 5600, 8000


def _line(args: list[str]) -> str:
    """One command: the program on the first line, then each flag with its values on a line of its own."""
    groups: list[list[str]] = [[]]
    for a in args:
        if a.startswith("--"):
            groups.append([])
        groups[-1].append(a)
    return " \\\n    ".join(" ".join(_quote(a) for a in g) for g in groups if g)


def _quote(a: str) -> str:
    return f'"{a}"' if "$" in a else shlex.quote(a)


def _header(plan: Plan, release: str, what: str) -> list[str]:
    p = plan.predicted
    modeled = scheduling_profile(plan.deployment.software).release
    note = [] if modeled.split(" (")[0] in release else [
        f"# The plan modeled {modeled}'s scheduling; its limits are given here in {release.split(' (')[0]}'s flags."]
    return ["#!/usr/bin/env bash", f"# {plan.label}: {what}, for {release}.", *note,
            f"# Planned by pdserve plan at {plan.request_rate:g} req/s: predicted mean TTFT "
            f"{p.get('mean_ttft_ms') or 0:.0f} ms, mean TPOT {p.get('mean_tpot_ms') or 0:.1f} ms, "
            f"{p.get('request_throughput') or 0:.2f} req/s.", "set -euo pipefail"]


def _roles(plan: Plan) -> list[tuple[Shape, int]]:
    return [(s, i) for s in shapes(plan) for i in range(s.count)]


def sglang_server_args(plan: Plan, s: Shape, index: int) -> list[str]:
    host_var = f"${{{s.role.upper()}_{index}_HOST}}"
    args = ["python", "-m", "sglang.launch_server", "--model-path", model_repo(plan), "--trust-remote-code",
            "--host", "0.0.0.0", "--port", str(SGLANG_PORT)]
    if s.role != "both":
        args += ["--disaggregation-mode", s.role, "--disaggregation-transfer-backend", "mooncake"]
        if s.role == "prefill":
            args += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT)]
    args += ["--tp-size", str(s.gpus)]
    if s.attention_dp > 1:
        args += ["--enable-dp-attention", "--dp-size", str(s.attention_dp)]
    if s.ep > 1:
        args += ["--ep-size", str(s.ep)]
        if s.attention_dp > 1:
            args += ["--moe-a2a-backend", "deepep", "--deepep-mode",
                     "low_latency" if s.role == "decode" else "normal"]
    args += ["--mem-fraction-static", f"{s.mem_fraction:g}", "--chunked-prefill-size", str(s.chunked_prefill_size),
             "--max-running-requests", str(s.max_running_requests)]
    if s.kv_precision == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    if s.nodes > 1:
        args += ["--nnodes", str(s.nodes), "--node-rank", "${NODE_RANK}", "--dist-init-addr",
                 f"{host_var}:{DIST_PORT}"]
    return args + ["--enable-metrics"]


def sglang_router_args(plan: Plan) -> list[str]:
    args = ["python", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    if plan.colocated:
        return args + ["--policy", "cache_aware", "--worker-urls"] + [
            f"http://${{BOTH_{i}_HOST}}:{SGLANG_PORT}" for i in range(plan.n_decode)] + ["--api-key", "${API_KEY}"]
    args += ["--pd-disaggregation", "--prefill-policy", "cache_aware", "--decode-policy", "round_robin"]
    for i in range(plan.n_prefill):
        args += ["--prefill", f"http://${{PREFILL_{i}_HOST}}:{SGLANG_PORT}", str(BOOTSTRAP_PORT)]
    for i in range(plan.n_decode):
        args += ["--decode", f"http://${{DECODE_{i}_HOST}}:{SGLANG_PORT}"]
    return args + ["--api-key", "${API_KEY}"]


def sglang(plan: Plan) -> dict[str, str]:
    files = {}
    for s, i in _roles(plan):
        lines = _header(plan, SGLANG_RELEASE, f"{s.role} instance {i} of {s.count}")
        lines.append(f': "${{{s.role.upper()}_{i}_HOST:?the address of this instance\'s first node}}"')
        if s.nodes > 1:
            lines.append(f"# {s.gpus} GPUs over {s.nodes} nodes: run this on each, NODE_RANK=0..{s.nodes - 1}")
            lines.append(': "${NODE_RANK:?0 on the first node, 1.. on the others}"')
        lines.append("exec " + _line(sglang_server_args(plan, s, i)))
        files[f"{s.role}-{i}.sh"] = "\n".join(lines) + "\n"
    lines = _header(plan, SGLANG_RELEASE, "the router in front of every instance")
    lines.append(': "${API_KEY:?the key clients must present}"')
    lines.append("exec " + _line(sglang_router_args(plan)))
    files["router.sh"] = "\n".join(lines) + "\n"
    return files


def _vllm_check(s: Shape, gpus_per_node: int) -> None:
    if s.attention_tp > gpus_per_node:
        raise ValueError(f"emit vllm: attention TP{s.attention_tp} spans nodes; vLLM then needs Ray, which this "
                         "emitter does not configure")
    if s.ep not in (1, s.gpus):
        raise ValueError(f"emit vllm: EP{s.ep} over {s.gpus} GPUs: vLLM's expert parallelism spans TP x DP, "
                         "all of the instance's GPUs")


def vllm_server_args(plan: Plan, s: Shape, index: int, node: int) -> list[str]:
    gpn = plan.deployment.gpus_per_node
    args = ["vllm", "serve", model_repo(plan), "--trust-remote-code", "--host", "0.0.0.0", "--port", str(VLLM_PORT),
            "--tensor-parallel-size", str(s.attention_tp)]
    if s.attention_dp > 1:
        args += ["--data-parallel-size", str(s.attention_dp)]
        if s.nodes > 1:
            local = max(1, gpn // s.attention_tp)
            args += ["--data-parallel-size-local", str(local), "--data-parallel-address",
                     f"${{{s.role.upper()}_{index}_HOST}}", "--data-parallel-rpc-port", str(VLLM_DP_RPC_PORT)]
            if node:
                args += ["--data-parallel-start-rank", str(node * local), "--headless"]
    if s.ep > 1:
        args += ["--enable-expert-parallel"]
    args += ["--gpu-memory-utilization", f"{s.mem_fraction:g}", "--max-num-batched-tokens",
             str(max(1, s.chunked_prefill_size // max(1, s.attention_dp))),
             "--max-num-seqs", str(max(1, s.max_running_requests // max(1, s.attention_dp)))]
    if s.kv_precision == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    if s.role != "both":
        args += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                                                    separators=(",", ":"))]
    return args + ["--api-key", "${API_KEY}"]


def vllm_proxy_args(plan: Plan) -> list[str]:
    hosts = lambda role, n: [f"${{{role}_{i}_HOST}}" for i in range(n)]  # noqa: E731
    return (["python3", "toy_proxy_server.py", "--host", "0.0.0.0", "--port", str(PROXY_PORT), "--prefiller-hosts"]
            + hosts("PREFILL", plan.n_prefill) + ["--prefiller-ports"] + [str(VLLM_PORT)] * plan.n_prefill
            + ["--decoder-hosts"] + hosts("DECODE", plan.n_decode) + ["--decoder-ports"]
            + [str(VLLM_PORT)] * plan.n_decode)


def vllm(plan: Plan) -> dict[str, str]:
    files = {}
    for s, i in _roles(plan):
        _vllm_check(s, plan.deployment.gpus_per_node)
        for node in range(s.nodes if s.attention_dp > 1 else 1):
            lines = _header(plan, VLLM_RELEASE, f"{s.role} instance {i} of {s.count}, node {node}")
            lines.append(f': "${{{s.role.upper()}_{i}_HOST:?the address of this instance\'s first node}}"')
            lines.append(': "${API_KEY:?the key clients and the proxy present}"')
            if s.role != "both":
                lines.append(f"export VLLM_NIXL_SIDE_CHANNEL_PORT={NIXL_PORT}")
            lines.append("exec " + _line(vllm_server_args(plan, s, i, node)))
            files[f"{s.role}-{i}-node{node}.sh"] = "\n".join(lines) + "\n"
    if not plan.colocated:
        lines = _header(plan, VLLM_RELEASE, "vLLM's P/D proxy (tests/v1/kv_connector/nixl_integration/"
                                            "toy_proxy_server.py in vLLM's repository)")
        lines.append(': "${OPENAI_API_KEY:?the key the proxy presents to the instances (their API_KEY)}"')
        lines.append("exec " + _line(vllm_proxy_args(plan)))
        files["proxy.sh"] = "\n".join(lines) + "\n"
    return files
