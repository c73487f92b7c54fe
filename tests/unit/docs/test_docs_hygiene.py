"""The docs stand alone: no references to this project's issue numbers (history lives in commit messages), no
hand-kept counts of tests (they drift), and the getting-started page leads on to cluster planning."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "mkdocs.yml").is_file())
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
# Another project's issue is a public source: "sgl-project/sglang issue 3196", "SGLang issue 5490"
OTHER_PROJECT = re.compile(r"(sglang|vllm|dynamo|inferencex|llama\.cpp|grpc|numba|github\.com)[\w./-]*\s*$", re.I)
ISSUE = re.compile(r"\b(issues?|pull request)\s*#?\s*\d+|\bthe issue('s)?\b", re.I)
TEST_COUNT = re.compile(r"\b\d[\d,]*\s+(unit |stack |model |fast |slow )?(tests|test cases|test files)\b", re.I)


def _hits(pattern: re.Pattern) -> list[str]:
    """Each match with its page and line; a match that follows another project's name (across a line break) is
    that project's."""
    out = []
    for page in PAGES:
        text = page.read_text()
        flat = text.replace("\n", " ")
        for m in pattern.finditer(flat):
            if not OTHER_PROJECT.search(flat[max(0, m.start() - 40):m.start()]):
                out.append(f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}")
    return out


def test_no_page_refers_to_this_projects_issues():
    assert _hits(ISSUE) == []


def test_no_page_keeps_a_count_of_tests():
    assert _hits(TEST_COUNT) == []


def test_getting_started_links_cluster_planning():
    assert "(cluster-planning.md)" in (ROOT / "docs" / "getting-started.md").read_text()
