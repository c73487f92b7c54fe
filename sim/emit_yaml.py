"""YAML for emitted manifests, without a YAML library at run time: block style, every string double-quoted (JSON's
escaping is valid YAML), so the output reads as hand-written YAML and parses the same everywhere."""

from __future__ import annotations

import json


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    return json.dumps(str(v), ensure_ascii=False)


def _lines(v, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(v, dict):
        if not v:
            return [pad + "{}"]
        out = []
        for k, item in v.items():
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{k}:")
                out += _lines(item, indent + (0 if isinstance(item, list) else 1))
            elif isinstance(item, (dict, list)):
                out.append(f"{pad}{k}: {'{}' if isinstance(item, dict) else '[]'}")
            else:
                out.append(f"{pad}{k}: {_scalar(item)}")
        return out
    if isinstance(v, list):
        out = []
        for item in v:
            sub = _lines(item, indent + 1)
            first = sub[0].lstrip()
            out.append(f"{pad}- {first}")
            out += sub[1:]
        return out
    return [pad + _scalar(v)]


def dump(doc: dict) -> str:
    return "\n".join(_lines(doc, 0)) + "\n"


def dump_all(docs: list[dict]) -> str:
    return "---\n".join(dump(d) for d in docs)
