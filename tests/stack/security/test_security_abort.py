"""Abort across clients: request ids are the caller's, and Abort acts on the caller's tenant's requests only.
Another tenant aborting the same id aborts nothing and learns nothing (the id is "not found", as an unknown one);
both tenants may use one id at once (the workers see internal ids with a random suffix: router/tenancy.py)."""

import asyncio

import grpc

from pdserve.client.client import AsyncPdserveClient
from tests.stack.conftest import TENANTS

PROMPT = list(range(3, 30))


def test_another_tenant_can_neither_abort_nor_see_a_request(tenant_stack):
    stack = tenant_stack

    async def scenario():
        async with AsyncPdserveClient(stack.router_target, token=TENANTS["alice"]) as alice, \
                AsyncPdserveClient(stack.router_target, token=TENANTS["mallory"]) as mallory:
            call = alice.generate(token_ids=PROMPT, max_tokens=3000, ignore_eos=True, temperature=0, request_id="job-1")
            await call.read()
            await call.read()  # decoding
            theirs = await mallory.abort(["job-1", "job-2"])
            # mallory may run a job-1 of its own meanwhile: ids are per tenant
            own = await mallory.complete(token_ids=PROMPT, max_tokens=2, temperature=0, request_id="job-1")
            after = [await call.read() for _ in range(3)]  # alice's stream goes on
            mine = await alice.abort(["job-1"])
            rest = []
            while (chunk := await call.read()) is not grpc.aio.EOF:
                rest.append(chunk)
            return theirs, own, after, mine, rest

    theirs, own, after, mine, rest = asyncio.run(scenario())
    assert list(theirs.aborted) == [] and list(theirs.not_found) == ["job-1", "job-2"]  # the same for both ids
    assert own.request_id == "job-1" and own.usage.completion_tokens == 2
    assert all(chunk.token_ids and not chunk.finish_reason for chunk in after)
    assert list(mine.aborted) == ["job-1"] and rest[-1].finish_reason == "abort"

