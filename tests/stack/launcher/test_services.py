"""The disaggregated stack on the tiny model: real processes on loopback ports, driven through the public API."""

import asyncio

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pdserve.client.client import AsyncPdserveClient, PdserveClient
from pdserve.common.convert import sampling_to_proto
from pdserve.engine.params import SamplingParams
from pdserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc, prefill_pb2, prefill_pb2_grpc
from tests.helpers import lease_alive, prefill_directly, reference, wait_until


def mixed_requests(vocab: int, n: int = 32):
    """n prompts of mixed lengths with a rotation of sampling and stop rules."""
    rng = np.random.default_rng(11)
    variants = [
        dict(max_tokens=1),
        dict(max_tokens=7),
        dict(max_tokens=30, repetition_max_repeats=3),
        dict(max_tokens=25, stop_token_ids=[]),  # filled with a token the reference emits
        dict(max_tokens=20, temperature=0.9, seed=5),
        dict(max_tokens=20, temperature=0.7, top_k=20, top_p=0.9, seed=9, frequency_penalty=0.5),
        dict(max_tokens=12, min_tokens=6, stop_token_ids=[]),
        dict(max_tokens=40),
    ]
    prompts, params = [], []
    for i in range(n):
        prompts.append(rng.integers(3, vocab, int(rng.integers(2, 90))).tolist())
        params.append(dict({"temperature": 0.0}, **variants[i % len(variants)]))
    return prompts, params


def finalize_stop_ids(runtime, prompts, params):
    """Give the stop-id variants a token the model will produce, so they really finish with 'stop'."""
    probe = reference(runtime, prompts, [SamplingParams(**{k: v for k, v in p.items() if k != "stop_token_ids"})
                                         for p in params])
    for seq, p in zip(probe, params):
        if "stop_token_ids" in p:
            p["stop_token_ids"] = [seq.output_ids[min(3, len(seq.output_ids) - 1)]]
    return [SamplingParams(**p) for p in params]


def test_32_concurrent_streams_match_in_process_engine(tiny_stack, tiny_runtime):
    prompts, raw = mixed_requests(tiny_runtime.config.vocab_size)
    params = finalize_stop_ids(tiny_runtime, prompts, raw)
    expected = reference(tiny_runtime, prompts, params)

    async def one(client, prompt, p):
        chunks = [c async for c in client.generate(token_ids=prompt, **vars(p))]
        return chunks

    async def run_all():
        async with AsyncPdserveClient(tiny_stack.router_target) as client:
            return await asyncio.gather(*(one(client, pr, p) for pr, p in zip(prompts, params)))

    results = asyncio.run(run_all())
    reasons = set()
    for chunks, want, p in zip(results, expected, params):
        last = chunks[-1]
        assert [t for c in chunks for t in c.token_ids] == want.output_ids, p
        assert "".join(c.text for c in chunks) == want.output_text
        assert last.finish_reason == want.finish_reason.value
        assert last.stop_reason == ("" if want.stop_reason is None else str(want.stop_reason))
        assert last.usage.completion_tokens == len(want.output_ids)
        assert all(not c.finish_reason for c in chunks[:-1])
        reasons.add(last.finish_reason)
    assert {"stop", "length", "repetition"} <= reasons


def test_shared_prefix_reports_cached_tokens(tiny_stack, tiny_runtime):
    system = "the thing is in the end and at the start it is the thing" * 2
    with PdserveClient(tiny_stack.router_target) as c:
        first = c.complete(messages=[{"role": "system", "content": system}, {"role": "user", "content": "one"}],
                           max_tokens=3, temperature=0)
        second = c.complete(messages=[{"role": "system", "content": system}, {"role": "user", "content": "two"}],
                            max_tokens=3, temperature=0)
    assert first.usage.cached_prompt_tokens == 0
    assert second.usage.cached_prompt_tokens >= 32
    assert second.usage.cached_prompt_tokens % 16 == 0
    assert second.usage.cached_prompt_tokens < second.usage.prompt_tokens


BAD_REQUESTS = [
    (dict(), "prompt"),
    (dict(prompt=""), "prompt.text"),
    (dict(token_ids=[1, 99999]), "prompt.token_ids"),
    (dict(messages=[{"role": "wizard", "content": "hi"}]), "prompt.chat.messages[0].role"),
    (dict(prompt="hi", max_tokens=100000), "max_tokens"),
    (dict(prompt="hi", temperature=-1.0), "temperature"),
    (dict(prompt="hi", top_p=0.0), "top_p"),
    (dict(prompt="hi", stop=["x"] * 40), "stop"),
    (dict(prompt="hi", stop=["y" * 1000]), "stop"),
    (dict(prompt="hi", stop_token_ids=[70000]), "stop_token_ids"),
    (dict(prompt="hi", min_tokens=9, max_tokens=3), "min_tokens"),
    (dict(prompt="hi", model="gpt-5"), "model"),
    (dict(prompt="hi", n=99), "n"),
    (dict(prompt="hi", logprobs=50), "logprobs"),
]


@pytest.mark.parametrize("kwargs,field", BAD_REQUESTS, ids=[f for _, f in BAD_REQUESTS])
def test_bad_input_is_invalid_argument_and_service_keeps_serving(tiny_stack, kwargs, field):
    from pdserve.client.client import build_request
    from pdserve.v1 import router_pb2_grpc

    with grpc.insecure_channel(tiny_stack.router_target) as ch:
        stub = router_pb2_grpc.RouterStub(ch)
        if kwargs:
            request = build_request(**kwargs) if "model" not in kwargs else build_request(
                kwargs["prompt"], model=kwargs["model"])
        else:
            from pdserve.v1 import router_pb2
            request = router_pb2.GenerateRequest()
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Generate(request))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(field + ":"), err.value.details()
        bad_request = error_details_pb2.BadRequest()  # the same field in the rich status (grpcio-status)
        assert rpc_status.from_call(err.value).details[0].Unpack(bad_request)
        assert bad_request.field_violations[0].field == field
    with PdserveClient(tiny_stack.router_target) as c:
        assert c.complete("the end", max_tokens=2, temperature=0).usage.completion_tokens == 2


def test_workers_validate_their_own_requests(tiny_stack, tiny_runtime):
    with tiny_stack.channel(tiny_stack.prefills[0], "router") as ch:
        with pytest.raises(grpc.RpcError) as err:
            prefill_pb2_grpc.PrefillStub(ch).Prefill(prefill_pb2.PrefillRequest(request_id="r1"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "token_ids" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:  # no lease: only the router makes them, one per request
            prefill_pb2_grpc.PrefillStub(ch).Prefill(prefill_pb2.PrefillRequest(
                request_id="r1", token_ids=[5, 6, 7], sampling=sampling_to_proto(SamplingParams(max_tokens=4))))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("lease_id:")
    with tiny_stack.channel(tiny_stack.decodes[0], "router") as ch:
        handle = common_pb2.KVHandle(block_keys=["k"], token_count=5, block_tokens=16)
        request = decode_pb2.DecodeRequest(request_id="r2", prompt_ids=[5, 6, 7], first_token=3, kv=handle,
                                           sampling=sampling_to_proto(SamplingParams(max_tokens=4)))
        with pytest.raises(grpc.RpcError) as err:
            list(decode_pb2_grpc.DecodeStub(ch).Decode(request))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "kv.token_count" in err.value.details()
        # a first token that already ends the request leaves decode nothing to do (the router finishes those)
        eos = tiny_runtime.tokenizer.eos_id
        handle = common_pb2.KVHandle(block_keys=["k"], token_count=3, block_tokens=16, lease_id="L", lease_ttl_s=30,
                                     model_fingerprint=tiny_runtime.config.fingerprint)
        request = decode_pb2.DecodeRequest(request_id="r3", prompt_ids=[5, 6, 7], first_token=eos, kv=handle,
                                           sampling=sampling_to_proto(SamplingParams(max_tokens=4)))
        with pytest.raises(grpc.RpcError) as err:
            list(decode_pb2_grpc.DecodeStub(ch).Decode(request))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("first_token:")


def test_unclaimed_prefill_lease_expires(tiny_stack):
    """A request whose decode never comes (router died, client gone) does not pin its blocks forever."""
    reply = prefill_directly(tiny_stack, list(range(3, 40)), sampling_to_proto(SamplingParams(max_tokens=5)),
                             "orphan-1", lease_ttl_s=1.0)
    assert len(reply.kv.block_keys) == 3  # 2 full blocks + the tail
    assert lease_alive(tiny_stack, reply.kv.lease_id)
    wait_until(lambda: not lease_alive(tiny_stack, reply.kv.lease_id), what="lease expiry")


def test_requests_under_one_id_never_share_kv_state(tiny_stack):
    """Two prefills under one request id, same length, other tokens: each under the lease the router made for it,
    so neither request can release the other's lease or read the other's tail KV."""
    replies = [prefill_directly(tiny_stack, list(range(start, start + 37)),
                                sampling_to_proto(SamplingParams(max_tokens=5)), "same-id", lease_ttl_s=1.0)
               for start in (3, 50)]
    first, second = (r.kv for r in replies)
    assert first.lease_id != second.lease_id
    assert first.block_keys[-1] != second.block_keys[-1]  # the tails
    wait_until(lambda: not any(lease_alive(tiny_stack, kv.lease_id) for kv in (first, second)), what="lease expiry")


def test_list_models(tiny_stack, tiny_runtime):
    with PdserveClient(tiny_stack.router_target) as c:
        [card] = c.list_models().models
    assert card.id == "tiny" and card.context_length == 512 and card.fingerprint == tiny_runtime.config.fingerprint
