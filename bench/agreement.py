"""The simulator against the paced emulator (``pdserve up --model synthetic --pace realtime``) on one seeded
workload: both run 1 prefill + 1 decode instance of the default modeled deployment, the same requests, arrivals and
concurrency cap; the emulator's figures are its modeled clock (what each request's final chunk reports)."""

from __future__ import annotations

import itertools

from pdserve.bench.serve import run_grpc
from pdserve.engine.scheduler import Role
from pdserve.launcher.stack import Stack, StackSpec
from pdserve.perfmodel.deployment import Deployment
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest
from pdserve.sim.report import summary
from pdserve.workload.arrivals import arrival_stream
from pdserve.workload.datasets import random_requests
from pdserve.workload.record import LoadSpec, Sampling
from pdserve.workload.stats import summarize

COMPARED = (("mean TTFT", "mean_ttft_ms"), ("mean TPOT", "mean_tpot_ms"), ("request throughput", "request_throughput"),
            ("output throughput", "output_throughput"))


def workload(n: int, input_len: tuple[int, int], output_len: tuple[int, int], seed: int):
    return random_requests(n, 49152, input_len, output_len, seed=seed)


def simulated(requests, rate: float, max_concurrency: int | None, seed: int) -> dict:
    offsets = list(itertools.islice(arrival_stream(rate, 1.0, seed), len(requests)))
    spec = ClusterSpec([Pool(Role.PREFILL, Deployment(), 1), Pool(Role.DECODE, Deployment(), 1)])
    result = Cluster(spec).run([SimRequest(r.token_ids, r.output_len) for r in requests], offsets, max_concurrency)
    return summary(result, max_concurrency, rate=rate, seed=seed)


def emulated(requests, rate: float, max_concurrency: int | None, seed: int, time_scale: float) -> dict:
    """Modeled figures of the paced synthetic stack (KV over RDMA, as the simulator places two 8-GPU instances on
    two nodes; the decode KV budget is the modeled capacity, as in the simulator)."""
    spec = StackSpec(model="synthetic", pace="realtime", time_scale=time_scale,
                     extra={"decode": ["--kv-link", "rdma", "--kv-budget", "modeled"]})
    load = LoadSpec(request_rate=rate, max_concurrency=max_concurrency, seed=seed, progress=False,
                    sampling=Sampling(temperature=0.0, ignore_eos=True))
    with Stack(spec) as stack:
        result = run_grpc(stack.router_target, requests, load)
    s = summarize(result)
    return {key: s[f"modeled_{key}"] for _, key in COMPARED} | {"failed": s["failed"], "completed": s["completed"]}


def compare(sim: dict, emu: dict) -> list[tuple[str, float, float, float]]:
    """(figure, simulated, emulated, relative difference) for each compared figure."""
    return [(label, sim[key], emu[key], sim[key] / emu[key] - 1.0) for label, key in COMPARED]
