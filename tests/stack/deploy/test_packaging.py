"""Installing pdserve claims one import name, `pdserve`, ships every package and data file the services read, and an
installed pdserve (a fresh venv outside the checkout) runs what the docs show."""

import json
import signal
import site
import subprocess
import sys
import zipfile
from email.parser import Parser
from fnmatch import fnmatch

import pytest

from tests import REPO_ROOT
from tests.helpers import pdserve_up
from tests.layout import installed_packages, package_data, package_folders


@pytest.fixture(scope="module")
def wheel_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(REPO_ROOT)], check=True, capture_output=True, timeout=300)
    (path,) = out.glob("pdserve-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel(wheel_path) -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path)


def test_the_wheel_claims_only_the_pdserve_name(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"pdserve"}


def test_every_package_and_data_file_is_in_the_wheel(wheel):
    names = set(wheel.namelist())
    for package in installed_packages():
        assert f"{package.replace('.', '/')}/__init__.py" in names, f"{package} is not installed"
    for proto in (REPO_ROOT / "protos").rglob("*.proto"):
        rel = proto.relative_to(REPO_ROOT / "protos").as_posix()
        assert rel in names and rel.replace(".proto", "_pb2_grpc.py") in names, rel
    # Every file beside the modules that is not Python is read at run time: each must be package data.
    data = package_data()
    for name, folder in package_folders().items():
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts:
                rel = path.relative_to(folder).as_posix()
                assert any(fnmatch(rel, pattern) for pattern in data.get(f"pdserve.{name}", [])), \
                    f"{name}/{rel} is not package data in pyproject.toml"
                assert f"pdserve/{name}/{rel}" in names, rel


def test_grpcio_tools_is_only_a_dev_dependency(wheel):
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = Parser().parsestr(wheel.read(meta).decode()).get_all("Requires-Dist")
    tools = [r for r in requires if r.startswith("grpcio-tools")]
    assert tools and all("extra ==" in r for r in tools), tools
    entry = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    assert "pdserve = pdserve.cli.main:main" in wheel.read(entry[0]).decode()


@pytest.fixture(scope="module")
def installed(wheel_path, tmp_path_factory):
    """A fresh venv outside the checkout with the wheel installed. Its dependencies come from the test venv's
    site-packages through a .pth path entry, which adds the folder but runs none of the .pth files in it, so the
    checkout's editable install stays out: pdserve resolves to the wheel alone."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (venv / purelib).mkdir(parents=True, exist_ok=True)
    (venv / purelib / "test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", purelib,
                    str(wheel_path)], check=True, capture_output=True, timeout=300)
    where = subprocess.run([str(python), "-c", "import pdserve.sim, sys; print(pdserve.sim.__path__[0])"],
                           check=True, capture_output=True, text=True, cwd=venv.parent).stdout.strip()
    assert where.startswith(purelib) and not where.startswith(str(REPO_ROOT)), where
    return python, venv.parent


def run_installed(installed, *args: str, timeout: float = 300) -> str:
    python, cwd = installed
    done = subprocess.run([str(python), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_installed_pdserve_replays_a_validation_row(installed):
    out = json.loads(run_installed(installed, "-m", "pdserve.sim.validate", "--rows", "gps-sgl-dpa-2k100",
                                   "--json", "--jobs", "1"))
    assert "gps-sgl-dpa-2k100" in json.dumps(out)


def test_installed_pdserve_prices_a_step(installed):
    out = json.loads(run_installed(installed, "-m", "pdserve.cli.main", "perf", "--json"))
    assert out


def test_installed_pdserve_starts_a_synthetic_stack(installed):
    python, cwd = installed
    proc, lines = pdserve_up(["--model", "synthetic", "--port", "0"], until="try:", python=str(python), cwd=cwd)
    try:
        assert any("router" in line for line in lines), lines
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
