"""The router's settings, checked once from its flags (:func:`check_flags`) and built into a :class:`RouterConfig`
(:meth:`RouterConfig.from_args`, with the model's metadata) that the service, the pools and the server are given:
only the router's ``main`` sees the argparse Namespace."""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.common.config import split_targets
from pdserve.engine.kv.blocks import DEFAULT_BLOCK_TOKENS
from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE
from pdserve.engine.params import InvalidParameter
from pdserve.kvstore.contract import DEFAULT_LEASE_TTL_S, check_lease_ttl
from pdserve.router.prompt import DEFAULT_TOKENIZER_WORKERS, MAX_PROMPT_CHARS
from pdserve.router.workers import split_target


@dataclass
class RouterConfig:
    model_name: str
    context_length: int
    fingerprint: str
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    colocated: bool = False
    max_inflight: int = 512
    prefill_retries: int = 3
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S
    decode_resumes: int = 3  # times one request may move to another decode worker mid-stream
    decode_prefetch: bool = True  # a decode worker imports the KV while prefill computes it (Decode.Prefetch)
    kv_dtype: str = DEFAULT_KV_DTYPE  # the workers' (names the blocks: the router predicts their keys)
    max_prompt_chars: int = MAX_PROMPT_CHARS  # a cap on the limit the context already sets (router/prompt.py)
    tokenizer_workers: int = DEFAULT_TOKENIZER_WORKERS
    # where the upstreams are, and how the router watches them
    prefill_targets: tuple[str, ...] = ()  # none when colocated
    decode_targets: tuple[str, ...] = ()
    kvstore_targets: tuple[str, ...] = ()  # none when colocated
    policy: str = "cache_aware"
    load_poll_interval_s: float = 0.25
    discovery_interval_s: float = 5.0
    # what one tenant and one connection may hold
    tenant_max_inflight: int = 256
    tenant_max_queued_tokens: int = 262144
    max_streams_per_connection: int = 100

    @classmethod
    def from_args(cls, args, model_name: str, context_length: int, fingerprint: str) -> RouterConfig:
        """The settings the (checked) flags describe, for the model whose metadata is given."""
        colocated = args.colocated
        return cls(
            model_name=args.served_model_name or model_name, context_length=context_length, fingerprint=fingerprint,
            block_tokens=args.block_tokens, colocated=colocated, max_inflight=args.max_inflight,
            lease_ttl_s=args.lease_ttl_s, decode_resumes=args.decode_resumes, decode_prefetch=args.decode_prefetch,
            kv_dtype=args.kv_dtype, max_prompt_chars=args.max_prompt_chars, tokenizer_workers=args.tokenizer_workers,
            prefill_targets=() if colocated else tuple(split_targets(args.prefill)),
            decode_targets=tuple(split_targets(args.decode)),
            kvstore_targets=() if colocated else tuple(split_targets(args.kvstore)),
            policy=args.policy, load_poll_interval_s=args.load_poll_interval_s,
            discovery_interval_s=args.discovery_interval_s, tenant_max_inflight=args.tenant_max_inflight,
            tenant_max_queued_tokens=args.tenant_max_queued_tokens,
            max_streams_per_connection=args.max_streams_per_connection)


def check_flags(args) -> None:
    """ValueError naming the flag for any the router cannot run with."""
    for flag in ("prefill", "decode"):
        try:
            [split_target(t) for t in split_targets(getattr(args, flag))]
        except ValueError as exc:
            raise ValueError(f"--{flag}: {exc}") from None
    for flag in ("max_streams_per_connection", "max_concurrent_rpcs", "max_prompt_chars", "tokenizer_workers"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')}: must be at least 1")
    for flag in ("connection_idle_s", "connection_max_age_s", "connection_age_grace_s"):
        if not getattr(args, flag) > 0:
            raise ValueError(f"--{flag.replace('_', '-')}: must be more than 0")
    for flag in ("tenant_max_inflight", "tenant_max_queued_tokens"):
        if getattr(args, flag) < 0:
            raise ValueError(f"--{flag.replace('_', '-')}: must be at least 0")
    if not args.colocated and not split_targets(args.kvstore):
        raise ValueError("--kvstore: a disaggregated router needs it (it creates each request's KV lease there)")
    try:
        check_lease_ttl(args.lease_ttl_s, "--lease-ttl-s")
    except InvalidParameter as exc:
        raise ValueError(str(exc)) from None
