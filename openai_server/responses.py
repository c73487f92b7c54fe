"""Router answers as OpenAI response objects, plus pdserve's extras.

Extras (ignored by OpenAI clients, readable from the JSON): each choice's ``stop_reason`` (vLLM's field: the stop
string or token id that ended the answer) and ``pdserve_finish_reason`` (pdserve's own reason, e.g. ``repetition``);
a top-level ``pdserve`` object with the request id and the timings in both clocks.
"""

from __future__ import annotations

import time
from typing import Any

from protos import common_pb2, router_pb2

# pdserve's finish reasons -> OpenAI's. "repetition" is a stop rule (the output looped); "abort" and "error" end the
# answer early, and OpenAI has no value for them: the extra field tells them apart.
FINISH_REASONS = {"stop": "stop", "length": "length", "repetition": "stop", "abort": "stop", "error": "stop"}


def finish_reason(reason: str) -> str | None:
    return FINISH_REASONS.get(reason, "stop") if reason else None


def stop_reason(reason: str, stops: list[str], stop_ids: list[int]) -> str | int | None:
    """vLLM's stop_reason: the matched stop string, the matched stop_token_ids entry, None for EOS / end of turn."""
    if reason in stops or not reason.isdigit():
        return reason or None
    return int(reason) if int(reason) in stop_ids else None


def usage(u: common_pb2.Usage) -> dict[str, Any]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens}}


def timings(t: common_pb2.Timings) -> dict[str, dict[str, float]]:
    """``{"wall": {"ttft_s": ...}, "modeled": {...}}`` from the Timings message, whatever fields it has."""
    out: dict[str, dict[str, float]] = {"wall": {}, "modeled": {}}
    for field in t.DESCRIPTOR.fields:
        for clock in out:
            suffix = f"_{clock}_s"
            if field.name.endswith(suffix):
                out[clock][field.name[:-len(suffix)] + "_s"] = getattr(t, field.name)
    return out


def extras(last: router_pb2.GenerateChunk | router_pb2.GenerateResponse) -> dict[str, Any]:
    return {"request_id": last.request_id, "timings": timings(last.timings)}


class Shaper:
    """Builds the response objects of one request (completions or chat, streamed or whole)."""

    def __init__(self, chat: bool, request_id: str, model: str, stops: list[str], stop_ids: list[int],
                 fingerprint: str = "") -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + request_id
        self.model = model
        self.stops = stops
        self.stop_ids = stop_ids
        self.fingerprint = fingerprint
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict]) -> dict[str, Any]:
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if self.fingerprint:
            out["system_fingerprint"] = self.fingerprint
        return out

    def _choice(self, text: str | None, reason: str, stop: str, *, delta: bool, first: bool = False) -> dict:
        if self.chat:
            content = {"role": "assistant"} if first or not delta else {}
            if text or first or not delta:
                content["content"] = text
            choice = {"index": 0, ("delta" if delta else "message"): content, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = finish_reason(reason)
        if reason:
            choice["stop_reason"] = stop_reason(stop, self.stops, self.stop_ids)
            choice["pdserve_finish_reason"] = reason
        return choice

    def whole(self, r: router_pb2.GenerateResponse) -> dict[str, Any]:
        obj = "chat.completion" if self.chat else "text_completion"
        out = self._envelope(obj, [self._choice(r.text, r.finish_reason, r.stop_reason, delta=False)])
        out["usage"] = usage(r.usage)
        out["pdserve"] = extras(r)
        return out

    def chunk(self, c: router_pb2.GenerateChunk, first: bool, include_usage: bool) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        out = self._envelope(obj, [self._choice(c.text, c.finish_reason, c.stop_reason, delta=True, first=first)])
        if include_usage:
            out["usage"] = None
        if c.finish_reason:
            out["pdserve"] = extras(c)
        return out

    def usage_chunk(self, c: router_pb2.GenerateChunk) -> dict[str, Any]:
        """The extra last chunk of ``stream_options.include_usage``: no choices, the usage."""
        out = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        out["usage"] = usage(c.usage)
        return out
