"""Conversions between the wire messages and the runtime's types, in one place for every service.

The sampling message and :class:`engine.params.SamplingParams` carry the same fields under the same names, so the
conversion walks the message's descriptor instead of listing the fields again (tests/test_protos.py checks the two
field lists stay equal).
"""

from __future__ import annotations

from pdserve.engine.params import SamplingParams
from pdserve.engine.text.logprobs import TokenLogprobs
from pdserve.engine.text.stop import StepResult
from pdserve.v1 import common_pb2

_SAMPLING_FIELDS = common_pb2.SamplingParams.DESCRIPTOR.fields
# Unset on the wire means something other than the in-process default: max_tokens runs to the end of the context.
_WIRE_UNSET = {"max_tokens": None}


def sampling_from_proto(msg: common_pb2.SamplingParams) -> SamplingParams:
    """Wire -> runtime. An unset optional field keeps the runtime's default (max_tokens: the rest of the context,
    resolved by validate_request). Does not validate."""
    values = {}
    for f in _SAMPLING_FIELDS:
        if f.has_presence and not msg.HasField(f.name):
            if f.name in _WIRE_UNSET:
                values[f.name] = _WIRE_UNSET[f.name]
            continue
        value = getattr(msg, f.name)
        values[f.name] = list(value) if f.is_repeated else value
    return SamplingParams(**values)


def sampling_to_proto(params: SamplingParams) -> common_pb2.SamplingParams:
    """Runtime -> wire; a None (e.g. no seed) stays unset."""
    msg = common_pb2.SamplingParams()
    for f in _SAMPLING_FIELDS:
        value = getattr(params, f.name)
        if value is None:
            continue
        if f.is_repeated:
            getattr(msg, f.name).extend(value)
        else:
            setattr(msg, f.name, value)
    return msg


def token_step(token_ids: list[int], result: StepResult) -> common_pb2.TokenStep:
    stop_reason = "" if result.stop_reason is None else str(result.stop_reason)
    finish = result.finish_reason.value if result.finish_reason is not None else ""
    step = common_pb2.TokenStep(token_ids=token_ids, text=result.text, finish_reason=finish, stop_reason=stop_reason)
    if result.logprobs is not None:
        step.logprobs.append(logprobs_to_proto(result.logprobs))
    return step


def logprobs_to_proto(lp: TokenLogprobs) -> common_pb2.Logprobs:
    return common_pb2.Logprobs(
        sampled=common_pb2.TokenLogprob(token_id=lp.token_id, logprob=lp.logprob), rank=lp.rank,
        top=[common_pb2.TokenLogprob(token_id=t, logprob=v) for t, v in lp.top])
