"""Writes docs/code-map.md: every package and module of pdserve with the first sentence of its docstring.

The map is generated so that it matches the tree: ``python scripts/code_map.py`` after moving or adding a module
(tests/unit/docs/test_code_map.py fails while the page is stale). The packages and their order come from
pyproject.toml's package list.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "code-map.md"
GENERATED = {"v1", "testing"}

HEADER = """# Map of the code

Every package and module of pdserve, with the first sentence of its docstring: what it is for. The page is
generated from the tree (`python scripts/code_map.py`); a test fails when it is stale. How the parts fit together:
[Architecture](index.md).
"""


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n", 1)[0].split())
    if not text and path.name == "__main__.py":
        return "the entry point of ``python -m`` for this package"
    match = re.match(r"(.+?\.)(\s|$)", text)
    sentence = match.group(1) if match else text
    return sentence.replace("|", "\\|")


def package_folders() -> list[tuple[str, Path]]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return [(name.split(".", 1)[1], ROOT / folder) for name, folder in table.items()
            if name.count(".") == 1 and name.split(".", 1)[1] not in GENERATED]


def render() -> str:
    out = [HEADER]
    for _, folder in package_folders():
        out.append(f"## `{folder.relative_to(ROOT).as_posix()}/`\n")
        init = folder / "__init__.py"
        if init.is_file() and first_sentence(init):
            out.append(first_sentence(init) + "\n")
        for package in sorted({p.parent for p in folder.rglob("__init__.py")}, key=lambda p: p.parts):
            rel = package.relative_to(ROOT).as_posix()
            modules = sorted(p for p in package.glob("*.py") if p.name != "__init__.py")
            if not modules:
                continue
            if package != folder:
                summary = first_sentence(package / "__init__.py")
                out.append(f"### `{rel}/`\n" + (f"\n{summary}\n" if summary else ""))
            out.append("| module | what it does |\n|---|---|")
            out += [f"| `{m.name}` | {first_sentence(m) or '(no docstring)'} |" for m in modules]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        current = OUT.read_text(encoding="utf-8") if OUT.is_file() else ""
        if current != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python scripts/code_map.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
