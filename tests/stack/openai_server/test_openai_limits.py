"""The HTTP edge under one greedy or hostile client: one tenant holding many streams leaves room for the others (the
edge's per-tenant limit, and enough router connections that no single one's stream cap is shared by everyone), and a
client that never finishes its headers or its body loses its connection."""

import asyncio
import socket

import httpx
import pytest

from tests.helpers import scaled, start_stack, wait_until

TENANTS = {"alice": "alice-token-lim1", "bob": "bob-token-lim02", "carol": "carol-token-lim3"}
STREAMS_PER_CONNECTION = 4
TENANT_MAX = 3


@pytest.fixture(scope="module")
def stack(tiny_long_model_path):
    s = start_stack(model=str(tiny_long_model_path), tenant_tokens=TENANTS, http_port=0, pace="realtime",
                    time_scale=8, extra={
                        "router": ["--max-streams-per-connection", str(STREAMS_PER_CONNECTION)],
                        "openai_server": ["--tenant-max-inflight", str(TENANT_MAX), "--max-concurrent-requests", "8",
                                          "--router-streams-per-connection", str(STREAMS_PER_CONNECTION),
                                          "--headers-deadline-s", "3", "--body-deadline-s", "3"]})
    yield s
    s.stop()


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TENANTS[tenant]}"}


LONG = {"model": "", "prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True, "stream": True}


async def hold_streams(client: httpx.AsyncClient, url: str, tenant: str, n: int) -> tuple[list, list[int]]:
    """Open ``n`` long streams for ``tenant``; returns the open responses (first event read) and every status."""
    opened, statuses = [], []
    for _ in range(n):
        request = client.build_request("POST", f"{url}/v1/completions", json=LONG, headers=auth(tenant))
        response = await client.send(request, stream=True)
        statuses.append(response.status_code)
        if response.status_code == 200:
            lines = response.aiter_lines()  # kept: a dropped iterator would close the response
            await anext(lines)  # the stream is open at the router
            opened.append((response, lines))
        else:
            await response.aclose()
    return opened, statuses


def test_a_tenant_holding_streams_does_not_block_the_others(stack):
    url = stack.http_url

    async def scenario():
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(timeout=scaled(60), limits=limits) as client:
            alice, alice_statuses = await hold_streams(client, url, "alice", TENANT_MAX + 1)
            bob, _ = await hold_streams(client, url, "bob", TENANT_MAX)
            try:
                reply = await client.post(f"{url}/v1/completions", headers=auth("carol"), timeout=scaled(30),
                                          json={"model": "", "prompt": "Hi", "max_tokens": 2})
                status = reply.status_code
            except httpx.TimeoutException:
                status = "timed out"
            finally:
                for r, _ in alice + bob:
                    await r.aclose()
            return alice_statuses, status

    alice_statuses, carol = asyncio.run(scenario())
    print(f"alice's {TENANT_MAX + 1} streams: {alice_statuses}; carol's 2-token completion while alice and bob hold "
          f"streams: {carol}")
    assert carol == 200
    assert alice_statuses == [200] * TENANT_MAX + [429]


def test_headers_that_never_finish_lose_the_connection(stack):
    host, port = stack.edge.target.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        s.settimeout(scaled(60))
        assert s.recv(1024) == b""  # closed by the edge


def test_a_body_that_never_finishes_is_answered_408(stack):
    host, port = stack.edge.target.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + TENANTS["alice"].encode() + b"\r\nContent-Length: 100\r\n\r\n{\"pro")
        s.settimeout(scaled(60))
        answer = s.recv(4096)
    print(answer.split(b"\r\n", 1)[0])
    assert answer.startswith(b"HTTP/1.1 408")


def test_every_slot_is_free_again_afterwards(stack):
    def free() -> bool:
        reply = httpx.post(f"{stack.http_url}/v1/completions", headers=auth("alice"), timeout=scaled(30),
                           json={"model": "", "prompt": "Hi", "max_tokens": 1})
        return reply.status_code == 200
    wait_until(free, 60, "alice's slots to be released after her streams closed")
