"""The JSON Schema of what users write in a schedule file (``schedsim schema``).

The pydantic models (:mod:`schedsim.spec.model`) describe a schedule *after* parameters, ``foreach``,
``when`` and expressions are expanded. A file as written differs: any number may be an expression
(``m: "{M // chunks}"`` or a bare parameter name), ``ops`` holds ``foreach`` blocks and ``when``
groups as well as ops, ops may carry ``when:``, ``ranks`` may be ``all``, a rank or an expression,
and a ``pipeline:`` block has its own keys (:class:`schedsim.spec.pipeline_block.PipelineSpec`).
:func:`user_schema` derives that schema from the models, so the two cannot drift apart.

Editors: put ``# yaml-language-server: $schema=schedule.schema.json`` (VS Code with the Red Hat YAML
extension) or a top-level ``$schema:`` key in a schedule; see docs/schedule_language.md.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["user_schema", "SCHEMA_ID"]

SCHEMA_ID = "https://schedsim.dev/schema/schedule-v1.json"
_EXPR = {"type": "string", "description": "An expression: a parameter name, or {expr} inside a string."}
_TEMPLATE = {"type": "string", "pattern": "\\{", "description": "A string with {expr} parts, filled in from parameters."}
_WHEN = {"anyOf": [{"type": "boolean"}, {"type": "string"}],
         "description": "Keep this entry only when the expression is true (may use parameters, loop variables "
                        "and `rank`)."}


def _loosen(node: Any) -> Any:
    """Let every number, boolean or integer list also be written as an expression string."""
    if isinstance(node, list):
        return [_loosen(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _loosen(v) for k, v in node.items()}
    if "properties" in out:  # an op's `kind` stays a constant: it selects the op model
        kind = node["properties"].get("kind")
        if kind is not None:
            out["properties"]["kind"] = kind
    if ("enum" in out or "const" in out or "pattern" in out) and out.get("type") == "string":
        return {"anyOf": [out, _TEMPLATE], **({"default": out["default"]} if "default" in out else {})}
    if out.get("type") in ("integer", "number", "boolean") and "const" not in out and "enum" not in out:
        desc = out.pop("description", None)
        default = out.pop("default", None)
        title = out.pop("title", None)
        new: dict[str, Any] = {"anyOf": [out, _EXPR]}
        if desc is not None:
            new["description"] = desc
        if default is not None:
            new["default"] = default
        if title is not None:
            new["title"] = title
        return new
    return out


def user_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a schedule file as written.

    Returns
    -------
    dict
        Validates every shipped schedule; rejects unknown keys, unknown op kinds and misspelled fields.
    """
    from schedsim.spec.model import ScheduleSpec
    from schedsim.spec.pipeline_block import PipelineSpec

    base = copy.deepcopy(ScheduleSpec.model_json_schema())
    defs = base.pop("$defs")
    for name, d in defs.items():
        d = _loosen(d)
        props = d.setdefault("properties", {})
        props["when"] = _WHEN
        if "ranks" in props:
            props["ranks"] = {
                "description": props["ranks"].get("description", "Ranks that run this op; default all."),
                "anyOf": [{"const": "all"}, {"type": "integer"}, {"type": "string"}, {"type": "null"},
                          {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}]}
        defs[name] = d
    op = base["properties"]["ops"]["items"]
    op.pop("discriminator", None)  # OpenAPI keyword; `kind` consts select the one matching op model
    defs["Op"] = op
    defs["Foreach"] = {
        "type": "object", "additionalProperties": False, "required": ["foreach", "ops"],
        "description": "Repeat `ops` for every combination of the loop variables.",
        "properties": {
            "foreach": {"type": "object", "minProperties": 1,
                        "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "integer"},
                                                           {"type": "array"}]},
                        "description": "Loop variable -> range(n), n, or a list."},
            "ops": {"$ref": "#/$defs/OpList"}, "when": _WHEN}}
    defs["Group"] = {
        "type": "object", "additionalProperties": False, "required": ["ops"],
        "description": "A group of ops, kept only when `when` holds.",
        "properties": {"ops": {"$ref": "#/$defs/OpList"}, "when": _WHEN}}
    defs["OpList"] = {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/Op"}, {"$ref": "#/$defs/Foreach"},
                                                           {"$ref": "#/$defs/Group"}]}}
    pipe = copy.deepcopy(PipelineSpec.model_json_schema())
    for name, d in pipe.pop("$defs", {}).items():
        defs["Pipeline" + name] = _loosen(d)
    pipe = _loosen(pipe)
    text = __import__("json").dumps(pipe).replace('"#/$defs/', '"#/$defs/Pipeline')
    pipe = __import__("json").loads(text)
    if "actions" in pipe["properties"]:  # YAML keys are ranks (integers); JSON only has string keys
        pipe["properties"]["actions"] = {
            "anyOf": [{"type": "object", "additionalProperties": {
                "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}, {"type": "null"}],
            "description": pipe["properties"]["actions"].get("description", "")}
    props = {k: _loosen(v) for k, v in base["properties"].items()}
    props["ops"] = {"$ref": "#/$defs/OpList", "description": base["properties"]["ops"].get("description", "")}
    props["pipeline"] = {"anyOf": [pipe, {"type": "null"}], "description": base["properties"]["pipeline"]["description"]}
    props["$schema"] = {"type": "string", "description": "URL or path of this schema, for editors."}
    props["world_size"] = {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, _EXPR],
                           "description": base["properties"]["world_size"].get("description", "")}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "schedsim schedule (as written)", "description": __doc__.split("\n\n")[0],
            "type": "object", "additionalProperties": False, "required": base.get("required", []),
            "properties": props, "$defs": defs}
