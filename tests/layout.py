"""The source tree as pyproject.toml declares it: the one package list that the layout and packaging tests read."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from tests import REPO_ROOT

GENERATED = {"v1", "testing"}  # protos/: the generated gRPC modules


@cache
def setuptools_table() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def installed_packages() -> list[str]:
    """Every package the wheel installs, dotted (``pdserve.engine.kv``)."""
    return list(setuptools_table()["packages"])


def package_folders() -> dict[str, Path]:
    """Each top-level package of ours (``engine``) and the folder it is installed from, generated modules aside."""
    return {name.split(".", 1)[1]: REPO_ROOT / folder
            for name, folder in setuptools_table()["package-dir"].items()
            if name.count(".") == 1 and name.split(".", 1)[1] not in GENERATED}


def package_data() -> dict[str, list[str]]:
    return setuptools_table().get("package-data", {})
