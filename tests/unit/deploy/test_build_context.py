"""What `docker build .` (or podman) sends as the build context, from .dockerignore by the builders' rules: only what
installing pdserve needs, and never a key, a token file or a stack's identities, even where the docs' commands put
them in the checkout."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from tests import REPO_ROOT

ROOT = REPO_ROOT


def _regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as the builders read it (moby/patternmatcher): ``*`` and ``?`` stay within a path
    segment, ``**`` spans any number of them."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + "$")


def rules() -> list[tuple[bool, re.Pattern]]:
    """(excludes, pattern) per line of .dockerignore, in order; the last pattern that matches a path decides."""
    found = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        found.append((not negated, _regex(line.lstrip("!").strip("/"))))
    return found


def excluded(path: str, patterns: list[tuple[bool, re.Pattern]]) -> bool:
    """Whether ``path`` (relative, with /) is left out: a pattern matching the path or any folder above it counts."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    verdict = False
    for excludes, pattern in patterns:
        if any(pattern.match(p) for p in prefixes):
            verdict = excludes
    return verdict


def test_secrets_never_enter_the_build_context():
    patterns = rules()
    planted = ["ids/router/key.pem", "ids/kv.key", "identities/ca/ca.key", "tokens", "tokens.txt", "my-stack/tokens",
               ".venv/bin/python", ".git/config", "router/ids/admin/key.pem", "common/test.key", "kvstore/tokens",
               "deploy/ids/prefill/cert.pem", "stack-state/run.json", ".env"]
    leaked = [p for p in planted if not excluded(p, patterns)]
    assert not leaked, f"these would be sent to the image build: {leaked}"


def test_the_checkout_context_holds_no_key_token_or_identities():
    patterns = rules()
    sent = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder).relative_to(ROOT).as_posix()
        at = "" if here == "." else here + "/"
        dirs[:] = [d for d in dirs if not excluded(at + d, patterns)]  # no pattern re-includes below an excluded one
        sent += [at + f for f in files if not excluded(at + f, patterns)]
    bad = [p for p in sent if p.endswith((".key", ".pem")) or Path(p).name in ("tokens", "tokens.txt")
           or {"ids", "identities"} & set(Path(p).parts)]
    assert sent and not bad, bad


def test_everything_the_install_needs_is_sent():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = ["pyproject.toml", project["project"]["readme"]]
    for folder in project["tool"]["setuptools"]["package-dir"].values():
        needed += [p.relative_to(ROOT).as_posix() for p in (ROOT / folder).glob("*.py")]
    missing = [p for p in needed if excluded(p, rules())]
    assert not missing, f".dockerignore leaves out what `pip install .` needs: {missing}"
