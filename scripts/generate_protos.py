"""Regenerates the Python modules from the .proto files: ``python scripts/generate_protos.py`` (needs the dev extra).

The .proto files live under protos/ at the path their package names (``pdserve/v1/router.proto`` is package
``pdserve.v1``), so the generated modules land next to them and import each other as ``pdserve.v1.<name>_pb2``:
the installed package maps ``pdserve.v1`` to protos/pdserve/v1 (pyproject.toml).
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent.parent / "protos"


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(out_dir: Path = PROTO_ROOT) -> None:
    """Writes <name>_pb2.py, _pb2.pyi and _pb2_grpc.py for every .proto under ``out_dir``, at the .proto's own path."""
    include = str(Path(protoc.__file__).parent / "_proto")
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}"] + [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT)
