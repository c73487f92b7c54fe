"""Installing pdserve claims one import name, `pdserve`, and ships every package and data file the services read."""

import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL_FOLDERS = ["client", "common", "decode_server", "engine", "kvstore", "openai_server", "perfmodel",
                     "prefill_server", "router", "sim"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    (path,) = out.glob("pdserve-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_claims_only_the_pdserve_name(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"pdserve"}


def test_every_package_folder_and_data_file_is_in_the_wheel(wheel):
    names = set(wheel.namelist())
    for folder in TOP_LEVEL_FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            assert f"pdserve/{init.relative_to(ROOT).as_posix()}" in names, f"{init.parent} is not installed"
    for proto in (ROOT / "protos").rglob("*.proto"):
        rel = proto.relative_to(ROOT / "protos").as_posix()
        assert rel in names and rel.replace(".proto", "_pb2_grpc.py") in names, rel
    for data in ["pdserve/perfmodel/data/published_measurements.csv", "pdserve/perfmodel/data/calibration.json",
                 "pdserve/workload/data/prompts.jsonl"]:
        assert data in names, data


def test_grpcio_tools_is_only_a_dev_dependency(wheel):
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = Parser().parsestr(wheel.read(meta).decode()).get_all("Requires-Dist")
    tools = [r for r in requires if r.startswith("grpcio-tools")]
    assert tools and all("extra ==" in r for r in tools), tools
    entry = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    assert "pdserve = pdserve.cli.main:main" in wheel.read(entry[0]).decode()
