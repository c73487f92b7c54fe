"""Router process: flags, model metadata (tokenizer, context length, fingerprint), worker pools, serve."""

from __future__ import annotations

import asyncio
import logging

from pdserve.common.config import FlagParser, add_model_flags, service_parser
from pdserve.common.metrics import set_process_info
from pdserve.common.server import READINESS_PERIOD_S, serve, setup_logging
from pdserve.common.tenants import TOKEN_ENV, Tenants
from pdserve.common.tls import configure_from_args, identity, warn_if_tokens_in_clear
from pdserve.engine.runtime import model_metadata
from pdserve.kvstore.client import KVStoreClient
from pdserve.kvstore.contract import DEFAULT_LEASE_TTL_S, MAX_LEASE_TTL_S
from pdserve.router.auth import TenantAuthInterceptor
from pdserve.router.config import RouterConfig, check_flags
from pdserve.router.metrics import init_labels
from pdserve.router.policy import PREFILL_POLICIES, PrefillPolicy
from pdserve.router.prompt import DEFAULT_TOKENIZER_WORKERS, MAX_PROMPT_CHARS, prompt_char_limit
from pdserve.router.public_port import PublicPortLimits, max_request_bytes
from pdserve.router.service import RouterService
from pdserve.router.tenancy import TenantLimits, TenantSalts
from pdserve.router.workers import decode_pool, prefill_pool
from pdserve.v1 import router_pb2, router_pb2_grpc

log = logging.getLogger("pdserve.router")


def build_parser() -> FlagParser:
    parser = service_parser("router", 50050, public=True)
    add_model_flags(parser)
    parser.add_argument("--served-model-name", default=None, help="model id clients send (default: file name)")
    parser.add_argument("--prefill", default="127.0.0.1:50061", help="prefill worker addresses, comma separated")
    parser.add_argument("--decode", default="127.0.0.1:50071", help="decode worker addresses, comma separated")
    parser.add_argument("--kvstore", default="127.0.0.1:50051", help="kvstore address(es), comma separated")
    parser.add_argument("--policy", default="cache_aware", choices=PREFILL_POLICIES, help="prefill routing policy")
    parser.add_argument("--colocated", action="store_true",
                        help="send each request to one decode worker that prefills locally (no kvstore)")
    parser.add_argument("--max-inflight", type=int, default=512, help="requests before RESOURCE_EXHAUSTED")
    parser.add_argument("--max-prompt-chars", type=int, default=MAX_PROMPT_CHARS,
                        help="characters of one prompt (all its messages) at most; lower still where no more could "
                             "fit the context (the context length x 8 characters a token, or the longest token's "
                             "bytes if fewer)")
    parser.add_argument("--tokenizer-workers", type=int, default=DEFAULT_TOKENIZER_WORKERS,
                        help="threads that render chat templates and tokenize, off the event loop")
    parser.add_argument("--lease-ttl-s", type=float, default=DEFAULT_LEASE_TTL_S,
                        help=f"how long prefilled KV waits for decode (at most {MAX_LEASE_TTL_S:g})")
    parser.add_argument("--no-decode-prefetch", dest="decode_prefetch", action="store_false",
                        help="send Decode only after prefill returns, without a decode worker importing the KV "
                             "while prefill computes it")
    parser.add_argument("--decode-resumes", type=int, default=3,
                        help="times a request may resume on another decode worker after its worker went away "
                             "mid-stream (0: such a request fails with UNAVAILABLE)")
    parser.add_argument("--auth-token-file", default=None,
                        help=f"require 'authorization: Bearer <token>' on the public API: lines 'TENANT TOKEN' (or a "
                             f"bare TOKEN: tenant default), read again when the file changes (or one token in "
                             f"${TOKEN_ENV}; never logged)")
    parser.add_argument("--tenant-max-inflight", type=int, default=128,
                        help="requests one tenant may have in flight (0: only --max-inflight)")
    parser.add_argument("--tenant-max-queued-tokens", type=int, default=262144,
                        help="prompt tokens of one tenant's requests waiting for prefill (0: no limit)")
    parser.add_argument("--max-streams-per-connection", type=int, default=100,
                        help="concurrent calls one client connection may have open (HTTP/2 max concurrent streams)")
    parser.add_argument("--max-concurrent-rpcs", type=int, default=1024,
                        help="calls in flight over all connections (more are refused RESOURCE_EXHAUSTED before "
                             "anything reads them); bounds the memory of requests being received")
    parser.add_argument("--connection-idle-s", type=float, default=300.0,
                        help="a client connection with no call for this long is closed (GOAWAY)")
    parser.add_argument("--connection-max-age-s", type=float, default=3600.0,
                        help="a client connection is asked to reconnect after this long (GOAWAY); its calls then "
                             "have --connection-age-grace-s to finish")
    parser.add_argument("--connection-age-grace-s", type=float, default=600.0,
                        help="how long calls on a connection past its age may still run")
    parser.add_argument("--load-poll-interval-s", type=float, default=0.25,
                        help="how often workers' loads are polled (0: never; routing then uses only local counts)")
    parser.add_argument("--discovery-interval-s", type=float, default=5.0,
                        help="how often worker DNS names (e.g. a headless Service) are resolved again to find the "
                             "replicas behind them (0: once at start); IP addresses are used as given")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_flags(args)
    except ValueError as exc:
        parser.error(str(exc))
    setup_logging(args.log_level)
    public = configure_from_args(args, "router", needs_kv_key=True)
    tenants = Tenants.from_flag(args.auth_token_file)
    warn_if_tokens_in_clear(args.host, args.port, public, tenants.enabled, "router")
    if not tenants.enabled:
        log.warning("no --auth-token-file: the public API is open, and every caller is the tenant 'default' (one "
                    "prefix cache, one request-id space, one Abort scope)")
    tokenizer, model_config, default_name = model_metadata(args.model)
    config = RouterConfig.from_args(args, default_name, model_config.context_length, model_config.fingerprint)
    set_process_info("router", model_name=config.model_name, fingerprint=config.fingerprint)
    port_limits = PublicPortLimits(
        max_request_bytes(prompt_char_limit(tokenizer, model_config.context_length, args.max_prompt_chars),
                          model_config.context_length),
        args.max_streams_per_connection, args.connection_idle_s, args.connection_max_age_s,
        args.connection_age_grace_s)

    async def run() -> None:
        prefill = prefill_pool(list(config.prefill_targets))
        decode = decode_pool(list(config.decode_targets))
        for pool in (prefill, decode):
            await pool.refresh()
        kv_client = KVStoreClient(list(config.kvstore_targets)) if config.kvstore_targets else None
        init_labels(config.model_name, [w.target for w in prefill.workers], [w.target for w in decode.workers],
                    config.policy)
        ident = identity()
        service = RouterService(config, tokenizer, prefill, decode, PrefillPolicy(config.policy, config.block_tokens),
                                kv_client, TenantLimits(config.tenant_max_inflight, config.tenant_max_queued_tokens,
                                                        tenants.names),
                                TenantSalts(ident.kv_key if ident else None))

        def register(server):
            router_pb2_grpc.add_RouterServicer_to_server(service, server)
            return [router_pb2.DESCRIPTOR.services_by_name["Router"].full_name]
        from pdserve.router.readiness import Readiness  # SERVING only while a worker of each needed role answers
        readiness = Readiness([decode] if args.colocated else [prefill, decode])
        readiness_task = asyncio.create_task(readiness.loop(READINESS_PERIOD_S))

        period = config.load_poll_interval_s
        pollers = [asyncio.create_task(p.poll_loads(period)) for p in (prefill, decode) if period > 0]
        if config.discovery_interval_s > 0:
            pollers += [asyncio.create_task(p.discover_loop(config.discovery_interval_s)) for p in (prefill, decode)]
        try:
            await serve("router", args.port, register, args.metrics_port, args.host, ready=readiness.ready,
                        interceptors=[TenantAuthInterceptor(tenants)], public=True, metrics_host=args.metrics_host,
                        options=port_limits.options(), maximum_concurrent_rpcs=args.max_concurrent_rpcs)
        finally:
            readiness_task.cancel()
            for p in pollers:
                p.cancel()
            await prefill.close()
            await decode.close()
            if kv_client is not None:
                await kv_client.close()

    asyncio.run(run())
