"""A tenant at its in-flight limit is refused before its prompt is tokenized, by Generate and by Tokenize alike, and
Tokenize/Detokenize calls hold one of the tenant's slots while they run."""

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from pdserve.router.prompt import RequestValidator
from pdserve.router.service import RouterService
from pdserve.router.tenancy import TenantLimits
from pdserve.v1 import router_pb2
from tests.unit.router.test_router_bounds import RecordingTokenizer


class Aborted(Exception):
    pass


class Context:
    def invocation_metadata(self):
        return ()

    async def abort(self, code, details="", trailing_metadata=()):
        self.code, self.details = code, details
        raise Aborted(details)


def service(tok: RecordingTokenizer, limits: TenantLimits) -> RouterService:
    svc = RouterService.__new__(RouterService)  # only what admission reads
    svc.validator = RequestValidator(tok, "m", context_length=100)
    svc.tokenizer = tok
    svc.limits = limits
    svc.config = SimpleNamespace(max_inflight=100, model_name="m", context_length=100)
    svc.inflight, svc.active, svc.mean_e2e_s = 0, {}, 0.0
    svc.retry_after_s = lambda: 1.0
    return svc


def test_a_tenant_at_its_limit_is_refused_before_tokenizing():
    tok, limits = RecordingTokenizer(), TenantLimits(max_inflight=1, max_queued_tokens=0)
    held = limits.admit("default", 0)  # the tenant's one slot is taken
    svc = service(tok, limits)
    request = router_pb2.GenerateRequest(text="a long prompt " * 20)
    for call in (lambda c: anext(svc.Generate(request, c)),
                 lambda c: svc.Tokenize(router_pb2.TokenizeRequest(text="a long prompt"), c)):
        context = Context()
        with pytest.raises(Aborted):
            asyncio.run(call(context))
        assert context.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--tenant-max-inflight" in context.details
    assert tok.threads == []  # nothing was tokenized
    held.close()
    assert limits.inflight["default"] == 0


def test_tokenize_holds_a_slot_while_it_runs():
    tok, limits = RecordingTokenizer(), TenantLimits(max_inflight=5, max_queued_tokens=0)
    svc = service(tok, limits)
    tok.release.clear()

    async def scenario():
        task = asyncio.ensure_future(svc.Tokenize(router_pb2.TokenizeRequest(text="hello there"), Context()))
        while not tok.threads:
            await asyncio.sleep(0.01)
        during = limits.inflight["default"]
        tok.release.set()
        reply = await task
        return during, reply.count

    during, count = asyncio.run(scenario())
    assert during == 1 and count >= 1 and limits.inflight["default"] == 0


def test_without_a_stack_key_tenant_salts_are_still_secret():
    """--insecure-internal: a random key per router, never a hash anyone can compute from the tenant's name."""
    import hashlib

    from pdserve.router.tenancy import TenantSalts

    plain = hashlib.sha256(b"pdserve/tenant-salt\0" + b"5:alice").hexdigest()
    one, two = TenantSalts(None), TenantSalts(None)
    assert one.salt("alice") == one.salt("alice") != plain
    assert one.salt("alice") != two.salt("alice")
