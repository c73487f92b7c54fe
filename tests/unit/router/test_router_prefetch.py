"""The router's prefetch is fire and forget: its outcome only reaches the log, and never changes the call's own
outcome (a done callback that failed inside the call's task once replaced every finished prefetch's result with an
AttributeError and filled the router's log with 'Task exception was never retrieved')."""

import asyncio
import logging

import grpc

from pdserve.router.upstream import start_prefetch
from pdserve.router.workers import Upstream
from pdserve.v1 import decode_pb2, decode_pb2_grpc


class Prefetcher(decode_pb2_grpc.DecodeServicer):
    async def Prefetch(self, request, context):
        if request.request_id == "refused":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "kv: lease_id: no lease")
        return decode_pb2.PrefetchResponse(token_count=5)


class OnePool:
    def __init__(self, worker: Upstream) -> None:
        self.worker = worker

    def available(self, exclude=frozenset()) -> list[Upstream]:
        return [self.worker]


def test_a_prefetch_keeps_its_outcome_and_a_failed_one_is_logged(caplog):
    async def scenario():
        server = grpc.aio.server()
        decode_pb2_grpc.add_DecodeServicer_to_server(Prefetcher(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        loop_errors: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: loop_errors.append(ctx))
        target = f"127.0.0.1:{port}"
        async with grpc.aio.insecure_channel(target) as channel:
            pool = OnePool(Upstream(target, decode_pb2_grpc.DecodeStub(channel), channel))
            outcomes = []
            for request_id in ("taken", "refused"):
                chosen, call = start_prefetch(pool, decode_pb2.PrefetchRequest(request_id=request_id), timeout=10)
                assert chosen == target
                try:
                    outcomes.append((await call).token_count)
                except grpc.aio.AioRpcError as err:
                    outcomes.append(err.code())
            for _ in range(100):  # the report task runs right after the call ends
                if "prefetch on" in caplog.text:
                    break
                await asyncio.sleep(0.01)
        await server.stop(None)
        return outcomes, loop_errors

    with caplog.at_level(logging.INFO, logger="pdserve.router"):
        outcomes, loop_errors = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert outcomes == [5, grpc.StatusCode.FAILED_PRECONDITION]
    assert "FAILED_PRECONDITION kv: lease_id: no lease" in caplog.text and not loop_errors
