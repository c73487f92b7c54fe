"""Async stream plumbing for the router: several samples' streams merged into one, and a stream that an Abort stops.

Both run each source in its own task and cancel it when they stop early, so a cancelled source cancels its upstream
gRPC call (relay_decode's ``finally``) and the worker frees the sequence's KV.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


class RequestAborted(Exception):
    """The request was aborted (the Abort RPC) while its stream was running."""


async def _cancel(task: asyncio.Future) -> None:
    if not task.done():
        task.cancel()
    with contextlib.suppress(BaseException):
        await task


async def abortable(source: AsyncIterator[T], aborted: asyncio.Event) -> AsyncIterator[T]:
    """``source``'s items until it ends, or RequestAborted once ``aborted`` is set (the pending read cancelled)."""
    watch = asyncio.ensure_future(aborted.wait())
    read: asyncio.Future | None = None
    try:
        while True:
            read = asyncio.ensure_future(anext(source, _END))
            await asyncio.wait({read, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                raise RequestAborted()
            item = read.result()
            if item is _END:
                return
            yield item
    finally:
        if read is not None:
            await _cancel(read)
        await _cancel(watch)
        with contextlib.suppress(BaseException):
            await source.aclose()  # stopped between items (the consumer went away): close it too


async def merge(sources: list[AsyncIterator[T]]) -> AsyncIterator[T]:
    """Items of every source as they come; the first failure ends the merge (and cancels the other sources)."""
    if len(sources) == 1:
        async for item in sources[0]:
            yield item
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(source: AsyncIterator[T]) -> None:
        try:
            async for item in source:
                await queue.put((item, None))
            await queue.put((_END, None))
        except Exception as exc:  # noqa: BLE001 - handed to the consumer
            await queue.put((_END, exc))

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
            await _cancel(task)
