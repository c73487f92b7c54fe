"""The committed generated modules match the .proto files."""

from pathlib import Path

from protos.generate import generate

ROOT = Path(__file__).resolve().parent.parent


def test_generated_modules_are_fresh(tmp_path):
    generate(tmp_path)
    fresh = sorted((tmp_path / "protos").glob("*_pb2*.py*"))
    assert fresh, "protoc produced nothing"
    for path in fresh:
        committed = ROOT / "protos" / path.name
        assert committed.exists(), f"{path.name} is not committed: run python -m protos.generate"
        assert committed.read_text() == path.read_text(), f"{path.name} is stale: run python -m protos.generate"
