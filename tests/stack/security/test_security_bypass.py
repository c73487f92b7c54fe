"""Router bypass: an attacker on the host calls the workers' ports directly, without the router's token, to get an
answer (Prefill then Decode, or Decode with colocated=true alone). On the default stack no such call gets past the
TLS handshake, and a stack identity of another role is refused per RPC; either way no prompt reaches a worker. The
same calls against an --insecure-internal stack do return an answer: the attack is real."""

import grpc
import pytest

from pdserve.client.client import PdserveClient
from pdserve.common.convert import sampling_to_proto
from pdserve.engine.params import SamplingParams
from pdserve.v1 import decode_pb2, decode_pb2_grpc, prefill_pb2, prefill_pb2_grpc
from tests.helpers import router_lease, start_stack

PROMPT = list(range(3, 40))
SAMPLING = sampling_to_proto(SamplingParams(max_tokens=4, temperature=0.0))


def prompts_seen(stack) -> float:
    return sum(stack.scrape(p).get(("pdserve_prefill_prompt_tokens_total", ()), 0.0) for p in stack.prefills) + \
        sum(stack.scrape(p).get(("pdserve_decode_generation_tokens_total", ()), 0.0) for p in stack.decodes)


def bypass(stack, channel_for) -> list[int]:
    """The attack: Decode colocated on the decode port; then Prefill and Decode with prefill's handle."""
    tokens = []
    with channel_for(stack.decodes[0]) as ch:
        request = decode_pb2.DecodeRequest(request_id="bypass-1", prompt_ids=PROMPT, colocated=True, sampling=SAMPLING)
        tokens += [t for c in decode_pb2_grpc.DecodeStub(ch).Decode(request, timeout=30) for t in c.step.token_ids]
    with channel_for(stack.prefills[0]) as ch:
        reply = prefill_pb2_grpc.PrefillStub(ch).Prefill(prefill_pb2.PrefillRequest(
            request_id="bypass-2", token_ids=PROMPT, sampling=SAMPLING, lease_id="guess", lease_ttl_s=30), timeout=30)
    with channel_for(stack.decodes[0]) as ch:
        request = decode_pb2.DecodeRequest(request_id="bypass-2", prompt_ids=PROMPT, kv=reply.kv, sampling=SAMPLING,
                                           first_token=reply.first.token_ids[0])
        tokens += [t for c in decode_pb2_grpc.DecodeStub(ch).Decode(request, timeout=30) for t in c.step.token_ids]
    return tokens


def test_workers_answer_nobody_but_the_router(tenant_stack, tmp_path):
    from pdserve.common.certs import make_identities
    from pdserve.common.identity import Identity

    stack = tenant_stack
    seen = prompts_seen(stack)
    stranger = Identity.load(make_identities(tmp_path, ["router"])["router"])  # a router certificate, wrong CA
    attackers = {"plaintext": lambda p: grpc.insecure_channel(p.target),
                 "another CA": lambda p: grpc.secure_channel(p.target, stranger.channel_credentials)}
    for name, channel_for in attackers.items():
        with pytest.raises(grpc.RpcError) as err:
            bypass(stack, channel_for)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE, name  # the handshake fails
    for role in ("decode", "prefill", "kvstore", "openai", "prometheus", "admin", "test"):  # a stack identity
        with pytest.raises(grpc.RpcError) as err:
            bypass(stack, lambda p, role=role: stack.channel(p, role))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, role
    assert prompts_seen(stack) == seen  # no prompt reached a worker
    with PdserveClient(stack.router_target, token="alice-token-0001") as c:  # the front door still works
        assert c.complete(token_ids=PROMPT, max_tokens=4, temperature=0).usage.completion_tokens == 4


def test_the_same_calls_answer_on_an_insecure_stack(tiny_model_path):
    """The control: with --insecure-internal the bypass returns tokens (and only a warning said so)."""
    stack = start_stack(model=str(tiny_model_path), insecure_internal=True, auth_token="front-door-token")
    try:
        lease = router_lease(stack)
        tokens = []
        with grpc.insecure_channel(stack.decodes[0].target) as ch:
            request = decode_pb2.DecodeRequest(request_id="b1", prompt_ids=PROMPT, colocated=True, sampling=SAMPLING)
            tokens += [t for c in decode_pb2_grpc.DecodeStub(ch).Decode(request, timeout=60) for t in c.step.token_ids]
        with grpc.insecure_channel(stack.prefills[0].target) as ch:
            reply = prefill_pb2_grpc.PrefillStub(ch).Prefill(prefill_pb2.PrefillRequest(
                request_id="b2", token_ids=PROMPT, sampling=SAMPLING, lease_id=lease, lease_ttl_s=30), timeout=60)
        assert len(tokens) == 4 and reply.first.token_ids
        assert "--insecure-internal" in stack.log_tail(stack.kvstores[0]) and "NOT secured" in stack.log_tail(
            stack.kvstores[0])
    finally:
        stack.stop()
