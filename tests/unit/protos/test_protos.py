"""The committed generated modules match the .proto files."""

import importlib.util

from tests import REPO_ROOT

ROOT = REPO_ROOT
PROTOS = ROOT / "protos"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_protos", ROOT / "scripts" / "generate_protos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_modules_are_fresh(tmp_path):
    _generator().generate(tmp_path)
    fresh = sorted(tmp_path.rglob("*_pb2*.py*"))
    assert len(fresh) == 3 * len(list(PROTOS.rglob("*.proto"))), "protoc did not write three modules per .proto"
    for path in fresh:
        committed = PROTOS / path.relative_to(tmp_path)
        assert committed.exists(), f"{committed} is not committed: run python scripts/generate_protos.py"
        assert committed.read_text() == path.read_text(), f"{committed} is stale: run python scripts/generate_protos.py"


def test_each_proto_package_matches_its_directory():
    """buf's PACKAGE_DIRECTORY_MATCH, checked without buf: pdserve/v1/x.proto declares package pdserve.v1."""
    for path in PROTOS.rglob("*.proto"):
        package = next(line.split()[1].rstrip(";") for line in path.read_text().splitlines()
                       if line.startswith("package "))
        assert package == ".".join(path.relative_to(PROTOS).parent.parts), path


def test_fault_injection_is_not_in_the_public_package():
    from pdserve.v1 import kvstore_pb2

    assert "Corrupt" not in kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].methods_by_name
    for path in PROTOS.joinpath("pdserve", "v1").glob("*.proto"):
        assert "Corrupt" not in path.read_text(), path


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
