"""The getting-started page's commands, as written: every ``pdserve`` command parses with the current command line
and every ``python -m pdserve.<service>`` flag is one its --help lists, so a renamed flag breaks the build instead of
a newcomer's first hour."""

import argparse
import re
import shlex
import subprocess
import sys

import pytest

from pdserve.cli.main import build_parser
from tests import REPO_ROOT

PAGES = [REPO_ROOT / "docs" / "getting-started.md", REPO_ROOT / "docs" / "openai-api.md",
         REPO_ROOT / "docs" / "load-testing.md"]


def commands(prefix: str) -> list[list[str]]:
    """Each command line of the pages' bash blocks that starts with ``prefix`` (continuations joined, comments
    dropped), as words."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if not line.startswith(prefix + " "):
                    continue  # e.g. a curl whose quoted JSON spans lines
                words = shlex.split(line, comments=True)
                if words and words[0] == prefix:
                    out.append(words[1:])
    return out


PDSERVE = commands(".venv/bin/pdserve")
SERVICES = [words for words in commands(".venv/bin/python") if words[:1] == ["-m"]]


def test_the_pages_have_commands():
    assert len(PDSERVE) >= 10 and len(SERVICES) >= 5
    assert not commands("python") and not commands("pdserve")  # every command runs from a fresh clone's venv


@pytest.mark.parametrize("words", PDSERVE, ids=[" ".join(w[:3]) for w in PDSERVE])
def test_pdserve_commands_parse(words, monkeypatch):
    parser = build_parser()
    monkeypatch.setattr(argparse.ArgumentParser, "exit", lambda self, status=0, message=None: pytest.fail(
        f"pdserve {' '.join(words)}: {message}"))
    if "--help" in words or "--version" in words:
        return
    args, unknown = parser.parse_known_args(words)
    assert not unknown, f"pdserve {' '.join(words)}: unrecognized {unknown}"


@pytest.mark.parametrize("words", SERVICES, ids=[w[1] for w in SERVICES])
def test_service_flags_are_in_their_help(words):
    helptext = subprocess.run([sys.executable, "-m", words[1], "--help"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=120)
    assert helptext.returncode == 0, helptext.stderr
    for flag in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
        assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", helptext.stdout), f"{words[1]}: {flag} is not a flag"
