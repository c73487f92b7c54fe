"""A stack whose workers keep a 16-bit KV cache (--kv-dtype float16): the disaggregated answers equal the in-process
engine's on the same cache type, and the kvstore holds half the bytes float32 blocks take."""

import asyncio

import pytest

from pdserve.client.client import AsyncPdserveClient
from pdserve.engine.kv.cache import block_nbytes
from pdserve.engine.params import SamplingParams
from pdserve.engine.runtime import Runtime
from tests.helpers import reference, start_stack

PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def half_stack(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), kv_dtype="float16")
    yield stack
    stack.stop()


def test_a_float16_stack_answers_as_the_in_process_engine_and_stores_half_the_bytes(half_stack, tiny_model_path):
    runtime = Runtime.load(tiny_model_path, kv_dtype="float16")
    vocab = runtime.config.vocab_size
    prompts = [[(7 * i + 3 * j) % (vocab - 3) + 3 for j in range(33 + 16 * i)] for i in range(3)]  # 2, 3, 4 blocks
    want = [s.output_ids for s in reference(runtime, prompts, [PARAMS] * len(prompts))]

    async def scenario():
        async with AsyncPdserveClient(half_stack.router_target) as client:
            async def one(prompt):
                return [t async for c in client.generate(token_ids=prompt, **vars(PARAMS)) for t in c.token_ids]
            got = [await one(p) for p in prompts]
        kv = half_stack.kv_client("admin")
        try:
            [stats] = await kv.stats()
        finally:
            await kv.close()
        return got, stats

    got, stats = asyncio.run(scenario())
    assert got == want
    # every prompt's full blocks (the tails are request-scoped, released with their lease, and may be evicted)
    full_blocks = sum(len(p) // 16 for p in prompts)
    half, single = block_nbytes(runtime.config, 16, "float16"), block_nbytes(runtime.config, 16, "float32")
    assert half * 2 == single
    assert full_blocks * half <= stats.bytes_used < full_blocks * single
