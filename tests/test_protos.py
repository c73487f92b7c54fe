"""The committed generated modules match the .proto files."""

from pathlib import Path

from pdserve.v1.generate import generate

ROOT = Path(__file__).resolve().parent.parent


def test_generated_modules_are_fresh(tmp_path):
    generate(tmp_path)
    fresh = sorted((tmp_path / "protos").glob("*_pb2*.py*"))
    assert fresh, "protoc produced nothing"
    for path in fresh:
        committed = ROOT / "protos" / path.name
        assert committed.exists(), f"{path.name} is not committed: run python -m protos.generate"
        assert committed.read_text() == path.read_text(), f"{path.name} is stale: run python -m protos.generate"


def test_sampling_message_and_params_carry_the_same_fields():
    """The conversion walks the message's fields by name: a field added on one side only must fail here."""
    from dataclasses import fields

    from pdserve.engine.params import SamplingParams
    from pdserve.v1 import common_pb2

    assert {f.name for f in common_pb2.SamplingParams.DESCRIPTOR.fields} == {f.name for f in fields(SamplingParams)}


def test_sampling_round_trip_keeps_defaults_for_unset_fields():
    from pdserve.common.convert import sampling_from_proto, sampling_to_proto
    from pdserve.engine.params import SamplingParams
    from pdserve.v1 import common_pb2

    params = SamplingParams(max_tokens=7, temperature=0.5, seed=3, stop=["x", "yz"], stop_token_ids=[4],
                            ignore_eos=True, repetition_max_period=5)
    assert sampling_from_proto(sampling_to_proto(params)) == params
    # unset optionals: vLLM's defaults, and max_tokens left to run to the end of the context
    assert sampling_from_proto(common_pb2.SamplingParams()) == SamplingParams(max_tokens=None)
    assert not sampling_to_proto(SamplingParams()).HasField("seed")
