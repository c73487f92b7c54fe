"""The public side: TLS on the router's port, bearer tokens checked before any work (never logged), and the router's
limits. (The internal plane: test_security_roles.py and the other test_security_*.py files.)"""

import asyncio
import ssl
from pathlib import Path

import grpc
import pytest

from pdserve.client.client import AsyncPdserveClient, PdserveClient
from tests import REPO_ROOT
from tests.helpers import start_stack

TOKEN = "s3cret-token-7f2c"
PROMPT = list(range(3, 30))


@pytest.fixture(scope="module")
def secure_stack(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), tls=True, auth_token=TOKEN, metrics=True,
                        extra={"router": ["--max-streams-per-connection", "1"],
                               "decode": ["--pace", "realtime", "--time-scale", "8"]})
    yield stack
    stack.stop()


def prefill_tokens_seen(stack) -> float:
    return stack.scrape(stack.prefills[0]).get(("pdserve_prefill_prompt_tokens_total", ()), 0.0)


def test_tls_and_token_serve_a_request(secure_stack):
    with PdserveClient(secure_stack.router_target, credentials=secure_stack.credentials(), token=TOKEN) as c:
        reply = c.complete(token_ids=PROMPT, max_tokens=3, temperature=0)
        assert reply.usage.completion_tokens == 3
        assert c.list_models().models[0].id


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x"])
def test_missing_or_wrong_token_is_unauthenticated_before_any_work(secure_stack, token):
    seen = prefill_tokens_seen(secure_stack)
    with PdserveClient(secure_stack.router_target, credentials=secure_stack.credentials(), token=token) as c:
        for call in (lambda: c.complete(token_ids=PROMPT, max_tokens=3),
                     lambda: list(c.generate(token_ids=PROMPT, max_tokens=3)),
                     lambda: c.complete(token_ids=[], max_tokens=0),  # invalid too: auth is checked first
                     c.list_models):
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "bearer token" in err.value.details()
    assert prefill_tokens_seen(secure_stack) == seen  # no prompt reached a worker


def test_token_never_logged(secure_stack):
    with PdserveClient(secure_stack.router_target, credentials=secure_stack.credentials(), token="guess-123") as c:
        with pytest.raises(grpc.RpcError):
            c.complete(token_ids=PROMPT, max_tokens=2)
    logs = "".join(p.log_path.read_text(errors="replace") for p in secure_stack.processes)
    assert "auth-token" in " ".join(secure_stack.router.args)  # given as a file, never on the command line
    assert TOKEN not in logs and "guess-123" not in logs and TOKEN not in " ".join(secure_stack.router.args)


def test_router_port_needs_no_client_certificate(secure_stack):
    creds = grpc.ssl_channel_credentials(Path(secure_stack.tls_ca).read_bytes())
    with PdserveClient(secure_stack.router_target, credentials=creds, token=TOKEN) as c:
        assert c.complete(token_ids=PROMPT, max_tokens=2, temperature=0).usage.completion_tokens == 2


def test_concurrent_streams_per_connection_are_limited(secure_stack):
    """With --max-streams-per-connection 1 a second call on the same connection waits for the first (here: past its
    deadline), while a new connection is served."""
    stack = secure_stack

    async def scenario():
        async with AsyncPdserveClient(stack.router_target, credentials=stack.credentials(), token=TOKEN) as c:
            long_call = c.generate(token_ids=PROMPT, max_tokens=60, ignore_eos=True, temperature=0)
            await long_call.read()  # its stream is open
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await c.complete(token_ids=PROMPT, max_tokens=2, timeout=3)
            async with AsyncPdserveClient(stack.router_target, credentials=stack.credentials(), token=TOKEN) as other:
                reply = await other.complete(token_ids=PROMPT, max_tokens=2, temperature=0, timeout=60)
            long_call.cancel()
            return err.value.code(), reply.usage.completion_tokens

    assert asyncio.run(scenario()) == (grpc.StatusCode.DEADLINE_EXCEEDED, 2)


def test_request_id_and_prompt_limits(secure_stack):
    with PdserveClient(secure_stack.router_target, credentials=secure_stack.credentials(), token=TOKEN) as c:
        with pytest.raises(grpc.RpcError) as err:
            c.complete(token_ids=PROMPT, max_tokens=2, request_id="r" * 129)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("request_id:")
        with pytest.raises(grpc.RpcError) as err:
            c.complete(token_ids=list(range(3, 40)) * 20, max_tokens=2)  # 740 tokens > the 512-token context
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("prompt:")
        with pytest.raises(grpc.RpcError) as err:
            c.complete(token_ids=PROMPT, max_tokens=2, stop=["s"] * 17)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("stop:")


def test_bad_tls_or_identity_paths_stop_the_service_naming_the_flag(tmp_path):
    import subprocess
    import sys

    for flags, named in ((["--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(tmp_path / "none.key")],
                          "--tls-cert"), (["--identity", str(tmp_path / "nowhere")], "--identity")):
        out = subprocess.run([sys.executable, "-m", "pdserve.router", "--port", "0", *flags], capture_output=True,
                             text=True, timeout=60, cwd=REPO_ROOT)
        assert out.returncode != 0 and named in out.stderr and "Traceback" not in out.stderr




def test_the_https_edge_checks_and_passes_the_callers_token_to_a_tls_router(tiny_model_path):
    """The OpenAI edge serves HTTPS, reaches a TLS router (verifying it with the stack's CA) and checks each caller's
    bearer token (an OpenAI client's api_key), then hands it to the router, which checks it again: the right key is
    served, a missing or wrong one is a 401 before any work."""
    import httpx
    import openai

    stack = start_stack(model=str(tiny_model_path), tls=True, auth_token=TOKEN, http_port=0, metrics=True)
    try:
        body = {"prompt": "the end", "max_tokens": 2, "temperature": 0}
        with openai.OpenAI(base_url=stack.http_url + "/v1", api_key=TOKEN, max_retries=0,
                           http_client=httpx.Client(verify=ssl.create_default_context(cafile=stack.tls_ca))) as client:
            done = client.completions.create(model=client.models.list().data[0].id, **body)
            assert done.usage.completion_tokens == 2
        seen = prefill_tokens_seen(stack)
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
            reply = httpx.post(stack.http_url + "/v1/completions", json=body, headers=headers, timeout=30,
                               verify=ssl.create_default_context(cafile=stack.tls_ca))
            assert reply.status_code == 401 and "bearer token" in reply.json()["error"]["message"]
        assert prefill_tokens_seen(stack) == seen
        logs = "".join(p.log_path.read_text(errors="replace") for p in stack.processes)
        assert TOKEN not in logs
    finally:
        stack.stop()
