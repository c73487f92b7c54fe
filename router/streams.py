"""Several samples' decode streams merged into one stream of chunks, as they arrive.

Each source runs in its own task; when the merge stops early (a failure, the client gone) the other tasks are
cancelled, and with them their upstream gRPC calls (relay_decode's ``finally``): the workers free those sequences.
The queue between the sources and the reader holds at most ``PER_SOURCE`` items a source: when the client reads slowly
the sources stop reading their upstream streams (gRPC flow control then holds the workers' sends), instead of the
router buffering every sample's whole answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")
_END = object()
PER_SOURCE = 4


async def merge(sources: list[AsyncIterator[T]]) -> AsyncIterator[T]:
    """Items of every source as they come; the first failure ends the merge (and cancels the other sources).

    A source's CancelledError (its upstream call was cancelled locally, e.g. by Abort) is passed on like a failure.
    """
    if len(sources) == 1:
        async for item in sources[0]:
            yield item
        return
    queue: asyncio.Queue = asyncio.Queue(maxsize=PER_SOURCE * len(sources))

    async def pump(source: AsyncIterator[T]) -> None:
        try:
            async for item in source:
                await queue.put((item, None))  # waits while the reader is behind
            await queue.put((_END, None))
        except (Exception, asyncio.CancelledError) as exc:
            if asyncio.current_task().cancelling():  # the merge itself is closing: nobody reads any more
                raise
            await queue.put((_END, exc))  # (cancelled while waiting, if the merge closes meanwhile)
            if isinstance(exc, asyncio.CancelledError):
                raise

    tasks = [asyncio.ensure_future(pump(s)) for s in sources]
    try:
        running = len(tasks)
        while running:
            item, error = await queue.get()
            if error is not None:
                raise error
            if item is _END:
                running -= 1
                continue
            yield item
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
