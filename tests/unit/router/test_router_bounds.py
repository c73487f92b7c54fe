"""The router's bounds, in process: a prompt too long for the context refused before tokenizing, tokenizing off the
event loop (and refused as overload past its queue), and n samples merged with backpressure to a slow reader."""

import asyncio
import threading

import pytest

from pdserve.engine.params import InvalidParameter
from pdserve.router.prompt import RequestValidator, TokenizerBusy, prompt_char_limit
from pdserve.router.streams import PER_SOURCE, merge
from pdserve.v1 import router_pb2


class RecordingTokenizer:
    """Token bytes of at most 4; records the thread each encode ran on, and can hold encodes until released."""

    vocab_size = 100
    tokens = ["t"] * 100

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.release = threading.Event()
        self.release.set()

    def token_bytes(self, token_id: int) -> bytes:
        return b"abcd"[: 1 + token_id % 4]

    def encode(self, text: str, add_bos=None) -> list[int]:
        self.threads.append(threading.current_thread().name)
        self.release.wait(30)
        return [1] * max(1, len(text) // 4)

    def encode_chat(self, messages) -> list[int]:
        return self.encode("".join(m["content"] for m in messages))


def chat(*contents: str) -> router_pb2.GenerateRequest:
    r = router_pb2.GenerateRequest()
    for c in contents:
        r.chat.messages.add(role="user", content=c)
    return r


def test_the_char_limit_is_what_the_context_can_hold():
    assert prompt_char_limit(RecordingTokenizer(), context_length=100) == 400  # 100 tokens of at most 4 bytes
    assert prompt_char_limit(RecordingTokenizer(), context_length=100, cap=50) == 50


def test_a_chat_over_the_limit_in_all_is_refused_before_tokenizing():
    """Each message is within the limit; together they are not (a 12 MB request can be twelve 1 MB
    messages). Refused naming the field and the limit, and the tokenizer never runs."""
    tok = RecordingTokenizer()
    validator = RequestValidator(tok, "m", context_length=100)
    with pytest.raises(InvalidParameter) as err:
        asyncio.run(validator.validate(chat("x" * 300, "y" * 300)))
    assert err.value.field == "prompt.chat.messages" and "600 characters; at most 400" in str(err.value)
    assert tok.threads == []


def test_tokenizing_runs_in_the_pool_not_on_the_event_loop():
    tok = RecordingTokenizer()
    validator = RequestValidator(tok, "m", context_length=100)
    request = router_pb2.GenerateRequest(text="hello world")
    ids, _ = asyncio.run(validator.validate(request))
    assert ids and tok.threads and all(name.startswith("tokenize") for name in tok.threads)


def test_past_its_queue_the_pool_refuses_as_overload():
    tok = RecordingTokenizer()
    tok.release.clear()  # encodes wait: the queue fills
    validator = RequestValidator(tok, "m", context_length=100, workers=1, max_pending=2)

    async def scenario():
        waiting = [asyncio.ensure_future(validator.validate(router_pb2.GenerateRequest(text="abc")))
                   for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(TokenizerBusy):
            await validator.validate(router_pb2.GenerateRequest(text="abc"))
        tok.release.set()
        await asyncio.gather(*waiting)
        assert validator.pending == 0

    asyncio.run(scenario())


def test_merge_reads_its_sources_no_faster_than_the_reader():
    """Two samples of 1,000 chunks each, a reader that takes 3 and stops: the sources have been read only as far as
    the bounded queue lets them, not to the end (without the bound, the router held every chunk of both)."""
    produced = [0, 0]

    async def source(i: int):
        for k in range(1000):
            produced[i] += 1
            yield (i, k)

    async def scenario():
        merged = merge([source(0), source(1)])
        got = [await anext(merged) for _ in range(3)]
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(got) == 3 and sum(produced) <= 3 + 2 * PER_SOURCE + 2
        await merged.aclose()

    asyncio.run(scenario())


def test_merge_passes_a_failure_on_after_what_came_before():
    async def good():
        for k in range(20):
            yield k

    async def bad():
        yield "a"
        raise RuntimeError("upstream failed")

    async def scenario():
        got = []
        with pytest.raises(RuntimeError, match="upstream failed"):
            async for item in merge([good(), bad()]):
                got.append(item)
                await asyncio.sleep(0)
        assert "a" in got

    asyncio.run(scenario())
