"""Per-tenant limits: one tenant at its share of the router (requests in flight, prompt tokens waiting for prefill)
is refused with retry advice while another tenant is served; both are counted in metrics by tenant."""

import asyncio

import grpc
import pytest

from pdserve.client.client import AsyncPdserveClient
from tests.helpers import start_stack, wait_until, without_frontend

TOKENS = {"alice": "alice-token-0001", "mallory": "mallory-token-02"}


@pytest.fixture(scope="module")
def stack(tiny_long_model_path, tmp_path_factory):
    # prefill paced to seconds per prompt (a request waits in prefill long enough to be counted as queued), decode to
    # >= 200 ms a step (a stream stays in flight); no modeled front end (x 300 it would hold each request 42 s)
    stack = start_stack(model=str(tiny_long_model_path), metrics=True, tenant_tokens=TOKENS,
                        extra={"router": ["--tenant-max-inflight", "2", "--tenant-max-queued-tokens", "50"],
                               "prefill": ["--pace", "realtime", "--time-scale", "300",
                                           *without_frontend(tmp_path_factory.mktemp("calibration"))],
                               "decode": ["--pace", "realtime", "--time-scale", "8"]})
    yield stack
    stack.stop()


def gauge(stack, name: str, tenant: str) -> float:
    return stack.scrape(stack.router).get((name, (("tenant", tenant),)), 0.0)


def test_a_tenant_at_its_limits_does_not_starve_another(stack):
    prompt = list(range(3, 43))  # 40 tokens

    async def scenario():
        async with AsyncPdserveClient(stack.router_target, token=TOKENS["mallory"]) as mallory, \
                AsyncPdserveClient(stack.router_target, token=TOKENS["alice"]) as alice:
            first = mallory.generate(token_ids=prompt, max_tokens=2000, ignore_eos=True, temperature=0)
            await asyncio.to_thread(wait_until, lambda: gauge(stack, "pdserve_tenant_queued_prompt_tokens", "mallory")
                                    == 40, 60, "mallory's prompt waiting for prefill")
            with pytest.raises(grpc.aio.AioRpcError) as queued:  # 40 + 40 tokens > 50
                await mallory.complete(token_ids=prompt, max_tokens=2)
            await first.read()  # prefilled: its tokens no longer count as queued
            second = mallory.generate(token_ids=[5, 6, 7], max_tokens=2000, ignore_eos=True, temperature=0)
            await second.read()
            with pytest.raises(grpc.aio.AioRpcError) as inflight:  # two in flight: the limit
                await mallory.complete(token_ids=[5, 6], max_tokens=2)
            served = await alice.complete(token_ids=[8, 9, 10], max_tokens=2, temperature=0)
            inflight_gauge = gauge(stack, "pdserve_tenant_requests_inflight", "mallory")
            first.cancel()
            second.cancel()
            return queued.value, inflight.value, served, inflight_gauge

    queued, inflight, served, inflight_gauge = asyncio.run(scenario())
    for err, flag in ((queued, "--tenant-max-queued-tokens"), (inflight, "--tenant-max-inflight")):
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and flag in err.details()
        assert "mallory" in err.details() and dict(err.trailing_metadata() or ()).get("retry-after-ms")
    assert served.usage.completion_tokens == 2 and inflight_gauge == 2
    refused = stack.scrape(stack.router)
    assert refused[("pdserve_tenant_rejected_total", (("limit", "queued_tokens"), ("tenant", "mallory")))] == 1
    assert refused[("pdserve_tenant_rejected_total", (("limit", "inflight"), ("tenant", "mallory")))] == 1
    assert refused[("pdserve_tenant_rejected_total", (("limit", "inflight"), ("tenant", "alice")))] == 0
    wait_until(lambda: gauge(stack, "pdserve_tenant_requests_inflight", "mallory") == 0, 30, "mallory's streams ended")
