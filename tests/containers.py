"""Podman for the container tests: a containers.conf that works in nested containers, the stand-in base images, one
image build per test session, and compose through PyPI's podman-compose."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import require_tool

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "localhost/pdserve:latest"  # what deploy/docker-compose.yml names
# read-only mounts that let pip inside the build reach the package index the way this host does
BUILD_MOUNTS = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf")
CONTAINERS_CONF = """[containers]
# nested containers cannot raise rlimits
default_ulimits = []

[engine]
# Debian's default runtime crun fails on setrlimit and cgroups here; runc works
runtime = "runc"
"""


def require_podman() -> dict[str, str]:
    """The environment podman runs with; skip (fail under CI=true) naming what is missing."""
    for tool, package in (("podman", "podman"), ("runc", "runc"), ("debootstrap", "debootstrap")):
        require_tool(tool, package)
    if not Path("/usr/lib/cni/dnsname").exists() and not shutil.which("aardvark-dns"):
        require_tool("dnsname", "golang-github-containernetworking-plugin-dnsname")
    if os.geteuid() != 0:
        message = "podman tests run as root here (rootless podman needs subuid ranges this machine lacks)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return os.environ.copy()


def podman_env(tmp: Path) -> dict[str, str]:
    conf = tmp / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = require_podman()
    env["CONTAINERS_CONF"] = str(conf)
    env["PATH"] = env.get("PATH", "") + ":/usr/sbin:/sbin"
    return env


def run(cmd: list[str], env: dict[str, str], timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return out


def build_image(env: dict[str, str]) -> None:
    """Stand-in base images (debootstrap), then deploy/Dockerfile exactly as a Docker user builds it."""
    run(["bash", "scripts/podman-images.sh"], env)
    mounts = [arg for path in BUILD_MOUNTS if Path(path).exists() for arg in ("-v", f"{path}:{path}:ro")]
    # docker format: OCI images cannot carry HEALTHCHECK
    run(["podman", "build", "--pull=never", "--format", "docker", *mounts, "-f", "deploy/Dockerfile", "-t", IMAGE, "."], env)


def compose_command() -> list[str]:
    script = Path(sys.executable).parent / "podman-compose"
    if not script.exists():
        pytest.skip("podman-compose is not installed: pip install -e '.[test]'")
    return [str(script)]
