"""``pdserve up`` (the stack as processes until Ctrl-C) and ``pdserve demo`` (up, the source article's two prompts,
down)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from pdserve.cli.generate import stream_from_router
from pdserve.cli.preflight import check_deployment_flag, check_model, check_ports
from pdserve.engine.kv.budget import DEFAULT_KV_BLOCKS
from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE, KV_DTYPES
from pdserve.kvstore.store import DEFAULT_CAPACITY_MB
from pdserve.launcher.ports import DEFAULT_METRICS_BASE_PORT
from pdserve.launcher.supervisor import RESTART_MODES
from pdserve.perfmodel.deployment import add_deployment_flag, deployment_text
from pdserve.router.policy import PREFILL_POLICIES
from pdserve.worker.clock import PACE_MODES

DEMO_PROMPTS = ("What is the capital of France?", "巴黎是法国的")


def stack_spec_from_args(a: argparse.Namespace):
    from pdserve.launcher.stack import StackSpec

    return StackSpec(model=a.model, n_prefill=a.prefill, n_decode=a.decode, n_kvstore=a.kvstore_shards,
                     colocated=a.colocated, policy=a.policy, router_port=a.port, metrics=a.metrics,
                     metrics_base_port=getattr(a, "metrics_base_port", 0),
                     kv_capacity_mb=a.kv_capacity_mb, kv_blocks=a.kv_blocks, pace=a.pace, time_scale=a.time_scale,
                     deployment=deployment_text(a), kv_dtype=a.kv_dtype, insecure_internal=a.insecure_internal,
                     http_port=getattr(a, "http_port", None), kv_shm=a.kv_shm, host=getattr(a, "host", "127.0.0.1"),
                     share_cores=not a.static_cores)


def plan_stack(a: argparse.Namespace, spec) -> None:
    """--plan: the emulated cluster of a saved plan (launcher/plan.py); --calibration: the workers' model."""
    if getattr(a, "plan", None):
        from pdserve.launcher.plan import apply_plan

        plan = apply_plan(a.plan, spec, a)
        p = plan.predicted
        print(f"emulating the plan {plan.label} at {plan.request_rate:g} req/s: synthetic backend paced at "
              f"{spec.deployment} x time scale {spec.time_scale:g}; predicted mean TTFT "
              f"{p.get('mean_ttft_ms') or 0:.0f} ms, mean TPOT {p.get('mean_tpot_ms') or 0:.1f} ms, "
              f"{p.get('request_throughput') or 0:.2f} req/s (send at {plan.request_rate / spec.time_scale:g} req/s "
              "of wall time)", flush=True)
    if a.calibration:
        from pdserve.perfmodel.calibration import load

        load(a.calibration)  # a bad file stops here, naming the flag
        if spec.pace != "realtime":
            raise ValueError("calibration: applies to the modeled clock; use it with --pace realtime")
        path = str(Path(a.calibration).resolve())
        for role in ("prefill", "decode"):
            spec.extra[role] = spec.extra.get(role, []) + ["--calibration", path]


def cmd_up(a: argparse.Namespace) -> int:
    from pdserve.launcher.stack import Stack
    from pdserve.launcher.state import NoStack, default_state_path, read_state, status_table
    from pdserve.launcher.supervisor import RestartPolicy, Supervisor

    if a.status:
        try:
            print(status_table(read_state(Path(a.state_file) if a.state_file else default_state_path(a.port))))
        except NoStack as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    spec = stack_spec_from_args(a)
    plan_stack(a, spec)
    spec.tls = a.tls
    if a.served_model_name:
        spec.extra.setdefault("router", []).extend(["--served-model-name", a.served_model_name])
    check_model(a.model)  # before any process starts: the error names the flag, in a second rather than after loads
    check_deployment_flag(a.deployment)
    check_ports(spec)
    if a.log_dir:
        Path(a.log_dir).mkdir(parents=True, exist_ok=True)
    if a.auth_token_file:
        from pdserve.common.tenants import Tenants

        Tenants.from_flag(a.auth_token_file)  # a bad file stops here, naming the flag
        spec.auth_token_file = str(Path(a.auth_token_file).resolve())
    if a.prometheus_config and not a.metrics:
        raise ValueError("prometheus_config: needs --metrics (the scrape config lists the metrics ports)")
    if spec.insecure_internal:
        from pdserve.common.tls import INSECURE_WARNING

        print(f"WARNING: {INSECURE_WARNING}", file=sys.stderr)
    policy = RestartPolicy(a.restart, max_restarts=a.max_restarts, window_s=a.restart_window_s)
    # nothing outlives pdserve up, not even its kill -9
    stack = Stack(spec, log_dir=a.log_dir, inherit_output=a.verbose, tied=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stack.start()
    serving, state_file = True, None
    try:
        state_file = Path(a.state_file) if a.state_file else default_state_path(stack.router.port)
        supervisor = Supervisor(stack, policy, state_file, log=lambda line: print(line, file=sys.stderr, flush=True),
                                info={"up_pid": os.getpid(), "auth": bool(spec.auth_token_file)})
        supervisor.write_state()
        print("pdserve stack is up (Ctrl-C stops it):")
        print(stack.describe())
        print(f"service logs: {stack.log_dir}" + (" (kept after stop)" if a.log_dir else " (removed at stop; "
                                                                                           "--log-dir keeps them)"))
        if a.prometheus_config:
            from pdserve.launcher.prometheus_config import write_scrape_config

            rules = [a.prometheus_rules] if a.prometheus_rules else None
            path = write_scrape_config(stack, a.prometheus_config, rule_files=rules,
                                       scrape_interval_s=a.prometheus_scrape_interval_s)
            print(f"prometheus scrape config: {path}")
        if stack.identities is not None and not spec.insecure_internal:
            print(f"internal plane: mutual TLS, an identity per role, RPCs authorized by role; identities in "
                  f"{stack.identities.directory} (metrics over HTTPS: present {stack.identities.dirs['prometheus']})")
        if stack.tls_ca:
            print(f"TLS on the router's port and the HTTP edge: verify with PDSERVE_TLS_CA={stack.tls_ca}")
        if stack.token_file is None:
            print("the public API takes no token: every caller is the tenant 'default' (--auth-token-file sets tenants)")
        print(f"processes exiting are restarted (--restart {policy.mode}); "
              f"status: pdserve up --status --port {stack.router.port}")
        if stack.edge is not None:
            print(f"OpenAI-compatible API: {stack.http_url}/v1 (e.g. curl {stack.http_url}/v1/models)")
        else:
            print(f"gRPC API on --port {stack.router.port}; no HTTP (OpenAI) API: --http-port PORT starts it")
        print(f"try: pdserve generate --target {stack.router_target} \"What is the capital of France?\"")
        sys.stdout.flush()
        serving = supervisor.run(stop)
        if not serving:
            print(f"giving the stack up: {supervisor.given_up}", file=sys.stderr)
    finally:
        stack.stop()
        if state_file is not None:
            state_file.unlink(missing_ok=True)
        print("pdserve stack stopped")
    return 0 if serving else 1


def cmd_demo(a: argparse.Namespace) -> int:
    """Start the whole stack, ask the source article's two prompts, stop the stack."""
    from pdserve.launcher.stack import Stack

    check_model(a.model)
    check_deployment_flag(a.deployment)
    spec = stack_spec_from_args(a)
    plan_stack(a, spec)
    with Stack(spec) as stack:
        print("stack up:\n" + stack.describe(), flush=True)
        for prompt in DEMO_PROMPTS:
            print(f"\n>>> {prompt}")
            stream_from_router(stack.router_target, dict(messages=[{"role": "user", "content": prompt}],
                                                         max_tokens=a.max_tokens, temperature=0.0))
    return 0


def add_stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF path (default: SmolLM2-135M-Instruct)")
    p.add_argument("--prefill", type=int, default=1, help="prefill workers")
    p.add_argument("--decode", type=int, default=1, help="decode workers")
    p.add_argument("--kvstore-shards", type=int, default=1)
    p.add_argument("--colocated", action="store_true", help="decode workers prefill locally (no kvstore)")
    p.add_argument("--policy", default="cache_aware", choices=PREFILL_POLICIES)
    p.add_argument("--port", type=int, default=50050,
                   help="the router's gRPC port (0: any free port); the HTTP API is --http-port")
    p.add_argument("--metrics", action="store_true", help="serve Prometheus /metrics on every service")
    p.add_argument("--kv-capacity-mb", type=float, default=DEFAULT_CAPACITY_MB, help="byte budget of each kvstore shard")
    p.add_argument("--kv-blocks", type=int, default=DEFAULT_KV_BLOCKS, help="decode KV budget in blocks")
    p.add_argument("--pace", default="off", choices=PACE_MODES,
                   help="realtime: each step lasts at least its modeled time x --time-scale")
    p.add_argument("--time-scale", type=float, default=1.0)
    add_deployment_flag(p, help="the workers' modeled deployment (KEY=V,..; e.g. hardware=H200,dp_attention=1)")
    p.add_argument("--kv-shm", action=argparse.BooleanOptionalAction, default=True,
                   help="move KV blocks between the kvstores and the workers through shared memory, all being on this "
                        "host (the default); --no-kv-shm sends them over the kvstore's socket")
    p.add_argument("--kv-dtype", default=DEFAULT_KV_DTYPE, choices=tuple(KV_DTYPES),
                   help="the KV cache's element type on every worker, in the kvstore and on the wire")
    p.add_argument("--calibration", default=None, metavar="CAL.json",
                   help="with --pace realtime: the workers' model fitted to your own runs (pdserve calibrate)")
    p.add_argument("--insecure-internal", action="store_true",
                   help="run the internal plane without identities, TLS or authorization (experiments only; warned)")
    p.add_argument("--static-cores", action="store_true",
                   help="workers that share this host's cores keep one each, never running a second thread on a core "
                        "another worker leaves idle (the default lends it)")


def register(sub) -> None:
    p = sub.add_parser("up", help="start kvstore, prefill, decode and router as processes; Ctrl-C stops all")
    add_stack_args(p)
    p.add_argument("--verbose", action="store_true", help="show the services' logs")
    p.add_argument("--host", default="127.0.0.1",
                   help="address every service binds and is reached at (0.0.0.0: all interfaces; secure it first)")
    p.add_argument("--served-model-name", default=None,
                   help="the model id /v1/models lists and requests name (default: the GGUF file name)")
    p.add_argument("--log-dir", default=None,
                   help="keep the services' logs (and the stack's identities) in this directory after stop "
                        "(default: a temporary one, removed at stop)")
    p.add_argument("--plan", default=None, metavar="PLAN.json",
                   help="start the emulated cluster of a plan (pdserve plan --save-result): its prefill and decode "
                        "workers on the synthetic backend, paced at the planned deployment's clock x --time-scale")
    p.add_argument("--http-port", type=int, default=None,
                   help="also start the OpenAI-compatible HTTP edge on this port (0: any free port)")
    p.add_argument("--metrics-base-port", type=int, default=DEFAULT_METRICS_BASE_PORT,
                   help="with --metrics: router at base, kvstores at base+10.., prefill base+20.., decode base+50..")
    p.add_argument("--prometheus-config", default=None, metavar="PATH",
                   help="with --metrics: write a Prometheus scrape config for this stack to PATH")
    p.add_argument("--prometheus-rules", default=None, metavar="PATH",
                   help="alert rules file the scrape config loads (e.g. deploy/prometheus/alerts.yml)")
    p.add_argument("--prometheus-scrape-interval-s", type=float, default=5.0, help="scrape interval it sets")
    p.add_argument("--tls", action="store_true",
                   help="serve TLS on the public side too: the router's port and the HTTP edge (HTTPS), with the "
                        "stack's CA (the internal plane has mutual TLS either way)")
    p.add_argument("--auth-token-file", default=None,
                   help="the router and the edge then require a bearer token: lines 'TENANT TOKEN' (or a bare TOKEN: "
                        "tenant default), read again when the file changes")
    p.add_argument("--restart", default="always", choices=RESTART_MODES,
                   help="restart a process that exits: always, on-failure (non-zero exits), or no (the first exit "
                        "stops the stack)")
    p.add_argument("--max-restarts", type=int, default=5,
                   help="restarts of one process within --restart-window-s beyond which it is left down")
    p.add_argument("--restart-window-s", type=float, default=300.0)
    p.add_argument("--status", action="store_true",
                   help="print the processes of the pdserve up running on --port (state, restarts, health) and exit")
    p.add_argument("--state-file", default=None,
                   help="where the running stack's state is kept (default: one file per router port in a private "
                        "directory under $XDG_RUNTIME_DIR or /tmp)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("demo", help="start the stack and answer the source article's two prompts")
    add_stack_args(p)
    p.set_defaults(port=0)
    p.add_argument("--max-tokens", type=int, default=64)
    p.set_defaults(func=cmd_demo)
