"""Structured outputs as OpenAI and vLLM spell them, turned into the sampling fields the engine constrains with.

Three spellings reach the same five fields of SamplingParams (engine/text/structured.py): OpenAI's
``response_format`` (``json_schema``, ``json_object``), vLLM's ``structured_outputs`` object, and vLLM's older
``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar``. At most one structured output per request.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pdserve.openai_server.errors import ApiError


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    def refuse_extras(self, where: str) -> None:
        for name, value in (self.model_extra or {}).items():
            if value not in (None, False):
                raise ApiError.invalid(f"{where}.{name}", "is not supported by pdserve (leave it unset)")


class ResponseFormat(_Body):
    type: str
    json_schema: dict[str, Any] | None = None


class StructuredOutputs(_Body):
    json_: str | dict[str, Any] | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None


def _schema_text(value: str | dict[str, Any], field: str) -> str:
    if isinstance(value, dict):
        return json.dumps(value)
    try:
        if not isinstance(json.loads(value), dict):
            raise ValueError("not an object")
    except ValueError:
        raise ApiError.invalid(field, "must be a JSON schema (an object, or its JSON text)") from None
    return value


def _response_format(rf: ResponseFormat) -> tuple[str, Any, str] | None:
    """(sampling field, value, request field) for OpenAI's response_format."""
    rf.refuse_extras("response_format")
    if rf.type == "text":
        return None
    if rf.type == "json_object":
        return "guided_json_object", True, "response_format"
    if rf.type == "json_schema":
        spec = rf.json_schema or {}
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise ApiError.invalid("response_format.json_schema.schema", "is required: the JSON schema (an object)")
        return "guided_json", json.dumps(schema), "response_format.json_schema.schema"
    raise ApiError.invalid("response_format.type", f"{rf.type!r} is not supported; use text, json_object or "
                                                   "json_schema")


def spec_fields(guided_json, guided_regex, guided_choice, guided_grammar, structured_outputs: StructuredOutputs | None,
                response_format: ResponseFormat | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The SamplingParams fields of the one structured output asked for, and each one's name in the request (for
    errors the router reports against its own field names)."""
    found: list[tuple[str, Any, str]] = []
    if guided_json is not None:
        found.append(("guided_json", _schema_text(guided_json, "guided_json"), "guided_json"))
    for field, value in (("guided_regex", guided_regex), ("guided_choice", guided_choice),
                         ("guided_grammar", guided_grammar)):
        if value is not None:
            found.append((field, value, field))
    if structured_outputs is not None:
        so = structured_outputs
        so.refuse_extras("structured_outputs")
        if so.json_ is not None:
            found.append(("guided_json", _schema_text(so.json_, "structured_outputs.json"), "structured_outputs.json"))
        for name, value in (("regex", so.regex), ("choice", so.choice), ("grammar", so.grammar)):
            if value is not None:
                found.append((f"guided_{name}", value, f"structured_outputs.{name}"))
        if so.json_object:
            found.append(("guided_json_object", True, "structured_outputs.json_object"))
    if response_format is not None:
        entry = _response_format(response_format)
        if entry is not None:
            found.append(entry)
    if len(found) > 1:
        raise ApiError.invalid(found[1][2], f"only one structured output per request; {found[0][2]} is set too")
    if found and found[0][0] == "guided_choice" and not found[0][1]:
        raise ApiError.invalid(found[0][2], "needs at least one choice")
    return {f: v for f, v, _ in found}, {f: name for f, _, name in found}
