"""Regenerates the Python modules from the .proto files: ``python -m protos.generate`` (run from the repo root)."""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_FILES = sorted((ROOT / "protos").glob("*.proto"))


def generate(out_dir: Path = ROOT) -> None:
    """Writes protos/*_pb2.py and *_pb2_grpc.py under ``out_dir`` (the import path is ``protos.<name>_pb2``)."""
    include = str(Path(protoc.__file__).parent / "_proto")
    args = ["protoc", f"-I{ROOT}", f"-I{include}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}"] + [str(p.relative_to(ROOT)) for p in PROTO_FILES]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
