"""The documentation: the README stays a front door, and the MkDocs site under docs/ builds with no warning.

The site build needs mkdocs and mkdocs-material; without them it skips, naming what to install, except under CI=true,
where it fails instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

README_MAX_LINES = 200


def _repo_root() -> Path:
    """The folder holding mkdocs.yml, above this file (whether it sits in tests/ or deeper)."""
    for folder in Path(__file__).resolve().parents:
        if (folder / "mkdocs.yml").is_file():
            return folder
    raise AssertionError("no mkdocs.yml above tests/: the site's configuration is missing")


ROOT = _repo_root()


def _require(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        message = f"{package} is not installed (pip install 'mkdocs>=1.6' 'mkdocs-material>=9.5')"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


def test_readme_is_a_front_door_with_a_quickstart():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: "
                                            "move the rest to docs/")
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"##\s+Quickstart\s*", line)]
    assert starts, "README.md has no '## Quickstart' section"
    end = next((i for i in range(starts[0] + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = "\n".join(lines[starts[0]:end])
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert command in section, f"the Quickstart section does not show `{command}`"


def test_site_builds_strict(tmp_path, monkeypatch):
    """``mkdocs build --strict``, in process: a broken link, a missing page or a page left out of the nav fails."""
    _require("mkdocs", "mkdocs")
    _require("material", "mkdocs-material")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")
    monkeypatch.chdir(ROOT)
    build(load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True))
    assert (tmp_path / "site" / "index.html").is_file()
