"""The router's public port under hostile load: a call without a valid token is refused from its headers, before
gRPC reads its message (so partial tokenless messages cost the router nothing); compressed requests are refused; a
message larger than any valid prompt is refused. Probes speak raw HTTP/2 (tests/h2probe.py) where grpcio cannot
misbehave on purpose."""

import os

import grpc
import pytest

from pdserve.v1 import router_pb2, router_pb2_grpc
from tests.h2probe import Probe
from tests.helpers import scaled, start_stack

TOKEN = "public-load-token-51c"
GENERATE = "/pdserve.v1.Router/Generate"
STREAMS = 60
DECLARED = 1_000_000  # each tokenless message claims ~1 MB (the port's limit: ~1.03 MiB for this model)


@pytest.fixture(scope="module")
def stack(tiny_model_path):
    s = start_stack(model=str(tiny_model_path), auth_token=TOKEN, metrics=True)
    yield s
    s.stop()


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("token", [None, "Bearer not-a-token"])
def test_tokenless_calls_are_refused_before_their_message_is_read(stack, token):
    """Each stream is ended by the server from its headers alone: it never grants the window the declared message
    would need (a server that reads the message first grants it and waits for the rest, which the probe then sends
    but for its last byte, as the audit's probe did)."""
    before = rss_mib(stack.router.pid)
    probe = Probe.connect(stack.router_target)
    probe.fill = True
    try:
        headers = [("authorization", token)] if token else []
        for i in range(STREAMS):
            probe.open_stream(2 * i + 1, stack.router_target, GENERATE, headers, DECLARED, send_bytes=16384)

        def settled(p: Probe) -> bool:
            return all(s.ended or not s.to_send for s in p.streams.values())
        probe.watch(settled, scaled(60))
        ended = sum(1 for s in probe.streams.values() if s.ended)
        granted = sum(s.granted for s in probe.streams.values())
        after = rss_mib(stack.router.pid)
        print(f"tokenless streams ended by the server: {ended}/{STREAMS}; stream window granted to them: "
              f"{granted} bytes; router RSS {before:.0f} -> {after:.0f} MiB")
        assert max(s.granted for s in probe.streams.values()) < 65535, "the router read a tokenless message"
        assert ended == STREAMS, f"only {ended} of {STREAMS} tokenless streams were refused"
    finally:
        probe.close()


def test_refusal_still_reads_as_unauthenticated(stack):
    with grpc.insecure_channel(stack.router_target) as ch:
        with pytest.raises(grpc.RpcError) as err:
            router_pb2_grpc.RouterStub(ch).Tokenize(router_pb2.TokenizeRequest(text="x" * 200_000), timeout=30)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_compressed_requests_are_refused(stack):
    auth = (("authorization", f"Bearer {TOKEN}"),)
    with grpc.insecure_channel(stack.router_target) as ch:
        stub = router_pb2_grpc.RouterStub(ch)
        assert stub.Tokenize(router_pb2.TokenizeRequest(text="hello"), metadata=auth, timeout=30).count
        with pytest.raises(grpc.RpcError) as err:
            stub.Tokenize(router_pb2.TokenizeRequest(text="a" * 100_000), metadata=auth, timeout=30,
                          compression=grpc.Compression.Gzip)
    print("gzip request:", err.value.code(), err.value.details())
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_a_message_larger_than_any_valid_prompt_is_refused(stack):
    auth = (("authorization", f"Bearer {TOKEN}"),)
    options = [("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(stack.router_target, options=options) as ch:
        with pytest.raises(grpc.RpcError) as err:
            router_pb2_grpc.RouterStub(ch).Tokenize(router_pb2.TokenizeRequest(text="a" * (12 << 20)),
                                                    metadata=auth, timeout=60)
    print("12 MiB request:", err.value.code(), err.value.details())
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert os.path.exists(f"/proc/{stack.router.pid}")
