"""The HTTP edge in front of a real stack when clients go away or crowd it: a disconnect mid-stream or while waiting for
a whole answer cancels the request upstream and frees its KV; overload is a 429 with Retry-After, a deadline a 504;
pdserve up --http-port."""

import json
import signal
import socket
from pathlib import Path

import httpx
import pytest

from tests.helpers import decode_load, kv_leases, pdserve_up, processes_mentioning, scrape, start_stack, wait_until


@pytest.fixture(scope="module")
def stack(long_stack):
    return long_stack


# --- a client that goes away ----------------------------------------------------------------------------------------
def _aborted(stack) -> float:
    return stack.scrape(stack.decodes[0]).get(
        ("pdserve_decode_requests_total", (("finished_reason", "abort"),)), 0.0)


def _assert_request_freed(stack, aborted_before: float) -> None:
    decode = stack.decodes[0].target
    wait_until(lambda: decode_load(stack, decode).running == 0, what="decode running == 0")
    load = decode_load(stack, decode)
    assert load.kv_blocks_used == 0 and load.waiting == 0
    assert kv_leases(stack) == 0
    assert _aborted(stack) == aborted_before + 1  # cancelled, not run to its 4000 tokens


def _disconnects(stack) -> float:
    return scrape(stack.edge.port)[("pdserve_http_client_disconnects_total", ())]


def test_disconnect_mid_stream_cancels_upstream_and_frees_kv(stack):
    before, gone_before = _aborted(stack), _disconnects(stack)
    body = {"prompt": list(range(3, 60)), "max_tokens": 4000, "ignore_eos": True, "temperature": 0, "stream": True}
    with httpx.stream("POST", stack.http_url + "/v1/completions", json=body) as r:
        seen = 0
        for line in r.iter_lines():
            seen += bool(line)
            if seen == 3:
                break
    # leaving the block closed the connection mid-stream
    _assert_request_freed(stack, before)
    assert _disconnects(stack) == gone_before + 1


def test_disconnect_while_waiting_for_a_whole_answer_cancels_upstream(stack):
    before, gone_before = _aborted(stack), _disconnects(stack)
    body = json.dumps({"prompt": list(range(3, 60)), "max_tokens": 4000, "ignore_eos": True,
                       "temperature": 0}).encode()
    host, port = stack.edge.target.split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_until(lambda: decode_load(stack, stack.decodes[0]).running == 1, what="the request is decoding")
    sock.close()
    _assert_request_freed(stack, before)
    wait_until(lambda: _disconnects(stack) == gone_before + 1, what="the edge saw the disconnect")


def test_overload_is_429_with_retry_after_and_a_deadline_is_504(tiny_long_model_path):
    stack = start_stack(model=str(tiny_long_model_path), http_port=0, extra={
        "router": ["--max-inflight", "1"], "openai_server": ["--request-timeout-s", "2", "--retry-after-s", "7"]})
    try:
        long = {"prompt": list(range(3, 30)), "max_tokens": 4000, "ignore_eos": True, "temperature": 0}
        with httpx.stream("POST", stack.http_url + "/v1/completions", json=dict(long, stream=True)) as r:
            lines = r.iter_lines()  # kept: a dropped iterator would close the stream
            next(line for line in lines if line)  # the long request is in flight now
            refused = httpx.post(stack.http_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "7"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        wait_until(lambda: decode_load(stack, stack.decodes[0]).running == 0, what="the stream was cancelled")
        late = httpx.post(stack.http_url + "/v1/completions", json=long, timeout=60)  # 4000 tokens take far over 2 s
        assert late.status_code == 504 and late.json()["error"]["code"] == "deadline_exceeded"
        wait_until(lambda: decode_load(stack, stack.decodes[0]).running == 0, what="the deadline freed the sequence")
        assert kv_leases(stack) == 0
    finally:
        stack.stop()


def test_pdserve_up_http_port(tiny_model_path, tmp_path):
    model = tmp_path / "up-http-model.gguf"
    model.write_bytes(Path(tiny_model_path).read_bytes())
    proc, lines = pdserve_up(["--model", str(model), "--port", "0", "--http-port", "0"], until="OpenAI-compatible API:")
    try:
        url = lines[-1].split()[2]
        router = next(line.split()[1] for line in lines if line.startswith("router"))
        edge_cmdline = "openai_server\0--router\0" + router
        assert url.endswith("/v1") and len(processes_mentioning(edge_cmdline)) == 1
        r = httpx.post(url + "/completions", json={"prompt": "the end", "max_tokens": 2})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert processes_mentioning(str(model)) == [] and processes_mentioning(edge_cmdline) == []
    finally:
        if proc.poll() is None:
            proc.kill()
