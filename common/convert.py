"""Conversions between the wire messages and the runtime's types, in one place for every service."""

from __future__ import annotations

from engine.params import SamplingParams
from engine.stop import StepResult
from protos import common_pb2


def sampling_from_proto(msg: common_pb2.SamplingParams) -> SamplingParams:
    """Wire -> runtime. Unset optional fields keep the runtime's defaults. Does not validate."""
    defaults = SamplingParams()

    def opt(name: str):
        return getattr(msg, name) if msg.HasField(name) else getattr(defaults, name)

    return SamplingParams(
        max_tokens=opt("max_tokens"),
        min_tokens=msg.min_tokens,
        temperature=opt("temperature"),
        top_k=msg.top_k,
        top_p=opt("top_p"),
        min_p=msg.min_p,
        seed=msg.seed if msg.HasField("seed") else None,
        repetition_penalty=opt("repetition_penalty"),
        presence_penalty=msg.presence_penalty,
        frequency_penalty=msg.frequency_penalty,
        stop=list(msg.stop),
        stop_token_ids=list(msg.stop_token_ids),
        ignore_eos=msg.ignore_eos,
        include_stop_str_in_output=msg.include_stop_str_in_output,
        repetition_max_repeats=msg.repetition_max_repeats,
        repetition_max_period=opt("repetition_max_period"),
    )


def sampling_to_proto(p: SamplingParams) -> common_pb2.SamplingParams:
    msg = common_pb2.SamplingParams(
        max_tokens=p.max_tokens, min_tokens=p.min_tokens, temperature=p.temperature, top_k=p.top_k, top_p=p.top_p,
        min_p=p.min_p, repetition_penalty=p.repetition_penalty, presence_penalty=p.presence_penalty,
        frequency_penalty=p.frequency_penalty, stop=p.stop, stop_token_ids=p.stop_token_ids, ignore_eos=p.ignore_eos,
        include_stop_str_in_output=p.include_stop_str_in_output, repetition_max_repeats=p.repetition_max_repeats,
        repetition_max_period=p.repetition_max_period,
    )
    if p.seed is not None:
        msg.seed = p.seed
    return msg


def token_step(token_ids: list[int], result: StepResult) -> common_pb2.TokenStep:
    stop_reason = "" if result.stop_reason is None else str(result.stop_reason)
    finish = result.finish_reason.value if result.finish_reason is not None else ""
    return common_pb2.TokenStep(token_ids=token_ids, text=result.text, finish_reason=finish, stop_reason=stop_reason)
