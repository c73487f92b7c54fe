"""The docs point at the tree as it is: the generated map of the code is current, and every repository path a page
or the README names in backticks exists."""

from __future__ import annotations

import re
import subprocess
import sys

from tests import REPO_ROOT

# `engine/kv/cache.py`, `sim/data/serving_runs.csv`, `deploy/k8s/`: a path under one of the repository's folders
TOP_FOLDERS = sorted(p.name for p in REPO_ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
PATH = re.compile(r"`((?:%s)/[\w./-]*)`" % "|".join(map(re.escape, TOP_FOLDERS)))


def test_the_map_of_the_code_is_current():
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "code_map.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def named_paths(text: str) -> set[str]:
    return {m.group(1).rstrip(".") for m in PATH.finditer(text) if "*" not in m.group(1)}


def test_every_path_the_docs_name_exists():
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    missing = [f"{page.relative_to(REPO_ROOT)}: {path}" for page in pages
               for path in sorted(named_paths(page.read_text(encoding="utf-8")))
               if not (REPO_ROOT / path).exists()]
    assert missing == []


def test_a_stale_path_is_found():
    assert named_paths("see `engine/kv_cache.py` and `sim/data/`") == {"engine/kv_cache.py", "sim/data/"}


def test_the_readme_names_every_bench_command():
    from pdserve.bench.cli import COMMANDS

    (row,) = [line for line in (REPO_ROOT / "README.md").read_text().splitlines() if line.startswith("| `bench/`")]
    assert [c for c in COMMANDS if c not in row] == []
