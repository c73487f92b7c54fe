"""Router answers as OpenAI response objects, plus pdserve's extras.

Several samples (``n``) are choices by index; streamed, their chunks interleave, one choice per chunk.
Log-probabilities are OpenAI's shapes: chat's ``logprobs.content`` (token, logprob, bytes, top_logprobs), completions'
``tokens`` / ``token_logprobs`` / ``top_logprobs`` / ``text_offset``.

Extras (ignored by OpenAI clients, readable from the JSON): each choice's ``stop_reason`` (vLLM's field: the stop
string or token id that ended the answer) and ``pdserve_finish_reason`` (pdserve's own reason, e.g. ``repetition``);
a top-level ``pdserve`` object with the request id and the timings in both clocks.
"""

from __future__ import annotations

import time
from typing import Any

from pdserve.v1 import common_pb2, router_pb2

# pdserve's finish reasons -> OpenAI's. "repetition" (the output looped) and "complete" (the model's own check said the
# answer covers the question) are stop rules; "abort" and "error" end the answer early, and OpenAI has no value for
# them: the extra field tells them apart.
FINISH_REASONS = {"stop": "stop", "length": "length", "repetition": "stop", "complete": "stop", "abort": "stop",
                  "error": "stop"}


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


def _logprob(value: float) -> float:
    """JSON has no -Infinity: a token the model rules out gets OpenAI's -9999.0."""
    return max(value, -9999.0)


def _chat_entry(t: common_pb2.TokenLogprob) -> dict[str, Any]:
    return {"token": t.token, "logprob": _logprob(t.logprob), "bytes": list(t.token_bytes)}


class Shaper:
    """Builds the response objects of one request (completions or chat, streamed or whole, n samples)."""

    def __init__(self, chat: bool, request_id: str, model: str, stops: list[str], stop_ids: list[int],
                 fingerprint: str = "", logprobs: bool = False) -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + request_id
        self.model = model
        self.stops = stops
        self.stop_ids = stop_ids
        self.fingerprint = fingerprint
        self.logprobs = logprobs
        self.created = int(time.time())
        self._started: set[int] = set()  # samples whose first chunk went out (chat: it carries the role)
        self._bytes: dict[int, bytes] = {}  # completions: each sample's token bytes so far (for text_offset)
        self.echo = ""  # completions' echo: the prompt, put before each sample's first text

    def _envelope(self, obj: str, choices: list[dict]) -> dict[str, Any]:
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if self.fingerprint:
            out["system_fingerprint"] = self.fingerprint
        return out

    def _logprobs(self, index: int, entries) -> dict[str, Any] | None:
        """OpenAI's logprobs object for these tokens: chat's ``content`` list, or completions' parallel lists."""
        if not self.logprobs:
            return None
        if self.chat:
            return {"content": [dict(_chat_entry(lp.sampled), top_logprobs=[_chat_entry(t) for t in lp.top])
                                for lp in entries]}
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for lp in entries:
            done = self._bytes.get(index, b"")
            out["text_offset"].append(len(done.decode("utf-8", errors="ignore")))
            self._bytes[index] = done + lp.sampled.token_bytes
            out["tokens"].append(lp.sampled.token)
            out["token_logprobs"].append(_logprob(lp.sampled.logprob))
            out["top_logprobs"].append({t.token: _logprob(t.logprob) for t in lp.top})
        return out

    def _choice(self, c: router_pb2.Choice | router_pb2.GenerateChunk, *, delta: bool) -> dict:
        text, reason = c.text, c.finish_reason
        logprobs = self._logprobs(c.index, c.logprobs)
        if self.chat:
            first = delta and c.index not in self._started
            self._started.add(c.index)
            content = {"role": "assistant"} if first or not delta else {}
            if text or first or not delta:
                content["content"] = text
            choice = {"index": c.index, ("delta" if delta else "message"): content, "logprobs": logprobs}
        else:
            if self.echo and c.index not in self._started:
                text = self.echo + text
            self._started.add(c.index)
            choice = {"index": c.index, "text": text, "logprobs": logprobs}
        choice["finish_reason"] = finish_reason(reason)
        if reason:
            choice["stop_reason"] = stop_reason(c.stop_reason, self.stops, self.stop_ids)
            choice["pdserve_finish_reason"] = reason
        return choice

    def whole(self, r: router_pb2.GenerateResponse) -> dict[str, Any]:
        obj = "chat.completion" if self.chat else "text_completion"
        choices = list(r.choices) or [router_pb2.Choice(  # a router from before n > 1
            token_ids=r.token_ids, text=r.text, finish_reason=r.finish_reason, stop_reason=r.stop_reason,
            logprobs=r.logprobs)]
        out = self._envelope(obj, [self._choice(c, delta=False) for c in choices])
        out["usage"] = usage(r.usage)
        out["pdserve"] = extras(r)
        return out

    def chunk(self, c: router_pb2.GenerateChunk, include_usage: bool) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        out = self._envelope(obj, [self._choice(c, delta=True)])
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
