"""A request's KV lease across a long prefill and across its loss.

Prefill is paced (its step lasts seconds) and frozen with SIGSTOP once it has acquired under the request's lease, so
that what happens to the lease before its Put is decided by the test, not by timing: the router keeps the lease
renewed while prefill runs (a prompt queued past the TTL keeps it), and when the kvstore no longer knows the lease
(here it expired while the router was frozen too; a restarted kvstore forgets it the same way) the router makes a new
one and prefills again. Either way the answer is the fault-free one.
"""

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from pdserve.client.client import PdserveClient
from pdserve.engine.params import SamplingParams
from tests.helpers import kv_leases, reference, start_stack, wait_until, without_frontend

LEASE_TTL_S = 2.0
PROMPT = list(range(3, 43))  # two full blocks: prefill acquires under the lease before computing
PARAMS = SamplingParams(max_tokens=4, temperature=0.0)


@pytest.fixture(scope="module")
def paced_prefill_stack(tiny_model_path, tmp_path_factory):
    # the modeled front end (139 ms, x 300 = 42 s of wall) would hold every request before its Acquire: none here
    frontend = without_frontend(tmp_path_factory.mktemp("calibration"))
    stack = start_stack(model=str(tiny_model_path), metrics=True,
                        extra={"prefill": ["--pace", "realtime", "--time-scale", "300", *frontend],
                               "router": ["--lease-ttl-s", str(LEASE_TTL_S)]})
    yield stack
    stack.stop()


def kv_ops(stack, op: str) -> float:
    return stack.scrape(stack.kvstores[0]).get(("pdserve_kvstore_operation_seconds_count", (("op", op),)), 0.0)


def lease_retries(stack) -> float:
    return stack.scrape(stack.router).get(("pdserve_router_retries_total", (("phase", "lease"),)), 0.0)


def answer_with_prefill_frozen(stack, while_frozen) -> list[int]:
    """Send the request; once prefill has acquired under its lease (the router's create and prefill's Acquire), stop
    the prefill worker, run ``while_frozen()``, let it go on, and return the tokens answered."""
    acquires = kv_ops(stack, "acquire")
    prefill = stack.prefills[0].popen
    with ThreadPoolExecutor(1) as pool, PdserveClient(stack.router_target) as client:
        reply = pool.submit(client.complete, token_ids=PROMPT, timeout=300, **vars(PARAMS))
        wait_until(lambda: kv_ops(stack, "acquire") >= acquires + 2, what="prefill's Acquire under the lease")
        prefill.send_signal(signal.SIGSTOP)
        try:
            while_frozen()
        finally:
            prefill.send_signal(signal.SIGCONT)
        return list(reply.result().choices[0].token_ids)


def test_the_router_keeps_the_lease_while_prefill_runs(paced_prefill_stack, tiny_runtime):
    stack = paced_prefill_stack
    retries = lease_retries(stack)

    def outlive_the_ttl():
        renewals = kv_ops(stack, "renew")  # the router's, every third of the TTL: five span more than a TTL
        wait_until(lambda: kv_ops(stack, "renew") >= renewals + 5, what="the router renewing the lease")
        assert kv_leases(stack) == 1

    assert answer_with_prefill_frozen(stack, outlive_the_ttl) == reference(tiny_runtime, [PROMPT], [PARAMS])[0].output_ids
    assert lease_retries(stack) == retries  # the first lease served: it never lapsed


def test_a_lost_lease_is_made_again_and_prefill_retried(paced_prefill_stack, tiny_runtime):
    stack = paced_prefill_stack
    retries = lease_retries(stack)
    router, prefill = stack.router.popen, stack.prefills[0].popen

    def lose_the_lease():
        router.send_signal(signal.SIGSTOP)  # nobody renews it: the kvstore expires it
        try:
            wait_until(lambda: kv_leases(stack) == 0, what="the lease expired")
        finally:
            prefill.send_signal(signal.SIGCONT)  # first, so that the router finds it answering
            router.send_signal(signal.SIGCONT)

    assert answer_with_prefill_frozen(stack, lose_the_lease) == reference(tiny_runtime, [PROMPT], [PARAMS])[0].output_ids
    assert lease_retries(stack) == retries + 1
