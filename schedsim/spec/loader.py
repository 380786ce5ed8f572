"""YAML → :class:`~schedsim.spec.model.ScheduleSpec`.

Steps, in order:

1. Parse the YAML keeping the line and column of every node.
2. Resolve ``params`` (defaults from the file, then ``--set`` overrides; a
   parameter may use earlier ones in ``{expr}``).
3. Expand ``foreach`` blocks (cartesian product over ranges and lists) and
   ``when`` conditions, evaluate expressions in numeric fields
   (``m: M*world_size/chunks``) and ``{expr}`` parts of strings (``name: mm{i}``).
   Expressions are evaluated by :mod:`schedsim.expr`, never by ``eval``.
4. Validate with pydantic. Every failure becomes a :class:`SpecError` naming
   the file, line, column, field path and a one-line fix; an unknown key gets
   the nearest valid key as a suggestion.

A ``foreach`` whose body is plain op entries (no nested blocks) is not expanded entry by entry: it
becomes one :class:`Block`, its whole iteration space evaluated at once (:func:`schedsim.expr.compile_vector`;
an entry instanced per rank, ``peer: (rank + 1) % W``, over iterations x ranks), one *representative* op
entry per distinct combination of the fields other than ``name``, ``deps``, ``tags``, ``p2p_batch`` and
``tag``. Pydantic and the cross-field rules check the representatives, names and dependencies are checked
in bulk, and the spec keeps its ops as a :class:`Layout` (``spec.ops`` is built on first access; the
lowering reads the blocks). Anything a block
cannot settle (an expression that fails or does not vectorise, a rule broken, a limit passed) sends the
schedule down the general path, which gives the same result and raises the same error.

Where each step lives: YAML reading and its guards in :mod:`schedsim.spec.yaml_reader`, ``--set`` overrides in
:mod:`schedsim.spec.overrides`, the evaluation context in :mod:`schedsim.spec.context`, ``foreach`` expansion
in :mod:`schedsim.spec.foreach` and the block path in :mod:`schedsim.spec.block`; this module runs them,
evaluates the ``pipeline`` block and turns pydantic's errors into :class:`SpecError` lines.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from schedsim.coded import Codes
from schedsim.errors import SpecError, printable
from schedsim.expr import ExprError, interpolate
from schedsim.spec.block import Block, Layout
from schedsim.spec.context import _Ctx, _eval_value, _suggest
from schedsim.spec.foreach import _expand_ops
from schedsim.spec.model import OP_MODELS, CollectiveOp, ScheduleSpec
from schedsim.spec.yaml_reader import LDict, LList, Mark, _strip, parse_yaml

__all__ = ["load_schedule", "load_text", "expand"]


def expand(data: Any, file: str, overrides: Mapping[str, Any] | None = None, *, blocks: bool = False) -> LDict:
    """Resolve parameters, ``foreach``, ``when`` and expressions.

    With ``blocks``, a plain ``foreach`` body is kept as one :class:`Block` in ``ops`` (for :func:`load_text`);
    otherwise every op entry is expanded.

    Returns the expanded document, still carrying source marks, ready for
    pydantic. See the module docstring for the rules.
    """
    ctx = _Ctx(file, blocks)
    if not isinstance(data, dict):
        raise ctx.err("a schedule must be a YAML mapping", getattr(data, "mark", None), "<top>",
                      fix="start the file with 'schema_version: 1'")
    km = getattr(data, "key_marks", {})
    valid_top = list(ScheduleSpec.model_fields)
    for k in data:
        if k == "$schema":  # for editors (docs/schedule_language.md); not part of the schedule
            continue
        if k not in valid_top:
            s = _suggest(k, valid_top)
            raise ctx.err(f"unknown key {k!r}", km.get(k), k,
                          fix=f"did you mean {s!r}?" if s else "valid keys: " + ", ".join(valid_top))
    raw_params = data.get("params") or LDict()
    if not isinstance(raw_params, dict):
        raise ctx.err("`params` must be a mapping", km.get("params"), "params", fix="write params: {chunks: 8}")
    overrides = dict(overrides or {})
    unknown = [k for k in overrides if k not in raw_params and k != "world_size"]
    if unknown:
        k = unknown[0]
        s = _suggest(k, list(raw_params))
        raise SpecError(
            f"--set {k}: the schedule has no parameter {k!r}",
            file=file, path=f"params.{k}",
            fix=(f"did you mean --set {s}=...?" if s else "parameters are: " + (", ".join(raw_params) or "none")),
        )
    env: dict[str, Any] = {}
    pkm = getattr(raw_params, "key_marks", {})
    params: dict[str, Any] = {}
    for k, v in raw_params.items():
        if k in overrides:
            v = overrides[k]
        try:
            val = interpolate(v, env) if isinstance(v, str) else v
        except ExprError as e:
            raise ctx.err(f"bad expression in parameter {k!r}: {e}", pkm.get(k), f"params.{k}",
                          fix="parameters may use earlier parameters inside {braces}") from None
        env[k] = val
        params[k] = val
    if "world_size" in overrides:
        env["world_size"] = overrides["world_size"]
    out = LDict()
    out.mark = getattr(data, "mark", None)
    for k, v in data.items():
        out.key_marks[k] = km.get(k)
        if k == "$schema":
            continue
        if k == "params":
            out[k] = params
        elif k == "ops":
            continue
        elif k == "world_size" and "world_size" in overrides:
            out[k] = overrides["world_size"]
        else:
            out[k] = _eval_top(k, v, env, ctx, km.get(k))
    if "world_size" not in out and "world_size" in env:
        out["world_size"] = env["world_size"]
    if isinstance(out.get("world_size"), int):
        env["world_size"] = out["world_size"]
    from schedsim.spec.limits import check_expansion  # bound the work before doing it

    check_expansion(data, env, file, out.get("pipeline"), out.get("training"))
    if "ops" in data:
        ops = LList()
        ops.mark = km.get("ops")
        _expand_ops(data["ops"], env, ctx, "ops", ops)
        out["ops"] = ops
    out["__env__"] = env
    return out


#: The name a ``pipeline:`` block's fields other than those that set its order (:data:`_ORDER_KEYS`) may use
#: for its chunks (virtual stages) per rank.
CHUNKS_NAME = "chunks_per_rank"
#: The fields of a ``pipeline:`` block that decide its chunks per rank, evaluated without :data:`CHUNKS_NAME`.
_ORDER_KEYS = frozenset({"schedule", "p", "m", "v", "group_size", "placement", "actions", "csv"})


def _eval_top(key: str, value: Any, env: dict[str, Any], ctx: _Ctx, mark: Mark | None) -> Any:
    """Evaluate one top-level value (a ``pipeline:`` block by :func:`_eval_pipeline`)."""
    if key == "pipeline" and isinstance(value, dict):
        return _eval_pipeline(value, env, ctx, mark)
    return _eval_value(key, value, env, ctx, mark, key)


def _eval_pipeline(block: Any, env: dict[str, Any], ctx: _Ctx, mark: Mark | None) -> Any:
    """Evaluate a ``pipeline:`` block: the fields that set its order first, then the others (``stage`` ops,
    sizes) with :data:`CHUNKS_NAME` bound to the block's chunks per rank (:func:`_block_chunks`), so that ops
    describing a rank's share of the model can split it over the chunks of any schedule (a stage is one
    chunk: a schedule of v chunks per rank runs the ``stage`` ops v times per microbatch on each rank)."""
    if CHUNKS_NAME in env:
        raise ctx.err(f"parameter {CHUNKS_NAME!r} has the name the pipeline block gives its chunks per rank",
                      mark, f"params.{CHUNKS_NAME}", fix=f"rename the parameter; inside the pipeline block "
                      f"{CHUNKS_NAME} is the schedule's chunks (virtual stages) per rank")
    for k, val in block.items():
        if k in _ORDER_KEYS and _uses_chunks(val):
            raise _chunks_in_order_field(ctx.file, k, getattr(block, "key_marks", {}).get(k, mark))
    first = LDict({k: val for k, val in block.items() if k in _ORDER_KEYS})
    first.mark, first.key_marks = getattr(block, "mark", mark), dict(getattr(block, "key_marks", {}))
    out = _eval_value("pipeline", first, env, ctx, mark, "pipeline")
    chunks = _block_chunks(out)
    sub = {**env, CHUNKS_NAME: chunks} if chunks is not None else env
    rest = LDict({k: val for k, val in block.items() if k not in _ORDER_KEYS})
    rest.mark, rest.key_marks = first.mark, first.key_marks
    _stage_group_names(rest.get("stage"), _GroupName)
    later = _eval_value("pipeline", rest, sub, ctx, mark, "pipeline")
    _stage_group_names(rest.get("stage"), str)
    _stage_group_names(later.get("stage"), str)
    done = LDict({k: out[k] if k in out else later[k] for k in block})  # the keys in their written order
    done.mark, done.key_marks = out.mark, {**out.key_marks, **later.key_marks}
    return done


class _GroupName:
    """A stage collective's group name held through the evaluation of the block (which keeps values of other
    types as they are)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


def _stage_group_names(stage: Any, wrap: Any) -> None:
    """In place: each stage op's ``group`` written as a string (the name of a group of the block, ``dp``:
    :mod:`schedsim.lower.pipeline`, which refuses other names) as ``wrap(it)``: :class:`_GroupName` before the
    block's evaluation, ``str`` after; read as a name, not an expression (a parameter called ``dp`` does not turn
    ``group: dp`` into its value)."""
    if not isinstance(stage, Mapping):
        return
    for ops in stage.values():
        for o in ops if isinstance(ops, list) else ():
            g = o.get("group") if isinstance(o, dict) else None
            if isinstance(g, (str, _GroupName)):
                o["group"] = wrap(str(g).strip())


def _uses_chunks(val: Any) -> bool:
    """Whether a (nested) value of a pipeline field names :data:`CHUNKS_NAME` (a string holding it as a word)."""
    import re

    if isinstance(val, str):
        return re.search(rf"\b{CHUNKS_NAME}\b", val) is not None
    if isinstance(val, Mapping):
        return any(_uses_chunks(v) for v in val.values())
    if isinstance(val, list):
        return any(_uses_chunks(v) for v in val)
    return False


def _chunks_in_order_field(file: str, key: str, mark: Mark | None) -> SpecError:
    """The error for :data:`CHUNKS_NAME` in a field of :data:`_ORDER_KEYS` (which decide its value)."""
    return SpecError(f"{CHUNKS_NAME} cannot be used in {key}: the fields {', '.join(sorted(_ORDER_KEYS))} decide "
                     "the chunks per rank, so they are evaluated before it exists", file=file,
                     line=mark[0] if mark else None, column=mark[1] if mark else None, path=f"pipeline.{key}",
                     fix=f"write {key} as a number or an expression of params; use {CHUNKS_NAME} in the stage ops "
                         "and the sizes (activation_memory_bytes, ...) of the pipeline block")


def _block_chunks(blk: Mapping[str, Any]) -> int | None:
    """Chunks per rank of an evaluated ``pipeline:`` block: the built-in schedule's (its ``v`` or default), for
    ``custom`` inline actions the stages they run over ``p``; None when unknown (the block's validation
    then words what is wrong, and a stage op using :data:`CHUNKS_NAME` gets an unknown-name error)."""
    import re

    from schedsim.pipeline import get_schedule

    v, p = blk.get("v"), blk.get("p")
    try:
        if blk.get("schedule") != "custom":
            return int(get_schedule(str(blk.get("schedule"))).chunks(v if isinstance(v, int) else None))
        acts = blk.get("actions")
        if isinstance(acts, dict) and isinstance(p, int) and p > 0:
            text = " ".join(" ".join(map(str, a)) if isinstance(a, list) else str(a) for a in acts.values())
            stages = {int(x) for x in re.findall(r"(?<![0-9])([0-9]+)[FIBW]", text)}
            return max(1, len(stages) // p) if stages else None
    except (ValueError, TypeError):
        return None
    return None


def _locate(doc: Any, loc: tuple[Any, ...]) -> tuple[Mark | None, str, Any, Any]:
    """Walk a pydantic error location through the expanded document.

    Returns (mark, dotted source path, parent container, last key).
    """
    cur = doc
    mark = getattr(doc, "mark", None)
    parts: list[str] = []
    parent, last = None, None
    for el in loc:
        if isinstance(cur, dict):
            if el not in cur and isinstance(el, str) and cur.get("kind") == el:
                continue  # the discriminator tag inserted by pydantic
            if el in cur:
                mark = cur.key_marks.get(el, mark) if isinstance(cur, LDict) else mark
                parent, last = cur, el
                if isinstance(cur.get(el), dict) and "__path__" in cur[el]:
                    parts = [cur[el]["__path__"]]
                else:
                    parts.append(f".{el}" if parts else str(el))
                cur = cur[el]
                continue
            parent, last = cur, el
            parts.append(f".{el}" if parts else str(el))
            break
        elif isinstance(cur, list) and isinstance(el, int) and el < len(cur):
            if isinstance(cur, LList) and el < len(cur.item_marks):
                mark = cur.item_marks[el] or mark
            parent, last = cur, el
            item = cur[el]
            if isinstance(item, dict) and "__path__" in item:
                parts = [item["__path__"]]
            else:
                parts.append(f"[{el}]")
            cur = item
        else:
            break
    return mark, "".join(parts), parent, last


def _valid_keys(parent: Any, loc: tuple[Any, ...] = ()) -> list[str]:
    if loc[:1] == ("training",) and len(loc) == 2:
        from schedsim.spec.training_block import ALIASES, TrainingSpec

        return [*TrainingSpec.model_fields, *ALIASES]
    if isinstance(parent, dict) and "kind" in parent and parent["kind"] in OP_MODELS:
        return list(OP_MODELS[parent["kind"]].model_fields)
    if isinstance(parent, dict) and "schema_version" in parent or parent is None:
        return list(ScheduleSpec.model_fields)
    if isinstance(parent, dict) and "name" in parent:
        return ["name", "kind", "ranks", "stream", "deps", "tags"]
    return list(ScheduleSpec.model_fields)


def _alias_twice(key: str, parent: Any, loc: tuple[Any, ...]) -> str | None:
    """The message for a ``training:`` key written beside its short alias or Megatron name (``tp`` and
    ``tensor_model_parallel_size``): the model takes one and reports the other as extra; None otherwise."""
    from schedsim.spec.training_block import ALIASES

    if loc[:1] != ("training",) or len(loc) != 2 or not isinstance(parent, dict):
        return None
    other = ALIASES.get(key) or next((k for k, v in ALIASES.items() if v == key), None)
    if other is None or other not in parent:
        return None
    short, name = (key, other) if key in ALIASES else (other, key)
    return f"{short!r} and {name!r} are both written: the alias and its Megatron name set the same argument"


def _negated_flag(key: str, loc: tuple[Any, ...]) -> str | None:
    """The fix for ``no_<flag>`` in a ``training:`` block, where ``<flag>`` is a boolean field: Megatron's
    ``--no-<flag>`` argument is that field set false (a plain "did you mean '<flag>'?" would invert the value
    written)."""
    from schedsim.spec.training_block import TrainingSpec

    flag = key.removeprefix("no_")
    field = TrainingSpec.model_fields.get(flag) if loc[:1] == ("training",) and len(loc) == 2 else None
    if flag == key or field is None or field.annotation is not bool:
        return None
    return f"Megatron's --no-{flag.replace('_', '-')} is written `{flag}: false` here"


_FIXES = {
    "int_parsing": "write an integer (expressions like M/chunks must divide evenly)",
    "int_from_float": "the expression gave a fraction; choose sizes that divide evenly or use // for floor division",
    "greater_than": "use a positive value",
    "int_type": "write a whole number such as 2 (no true/false, no 2.0: Megatron's argparse takes type=int; use // "
                "in expressions)",
    "bool_type": "write true or false",
    "literal_error": "use one of the allowed values listed above",
    "missing": "add this field",
    "float_parsing": "write a number",
    "string_pattern_mismatch": "names start with a letter or _, then letters, digits, _ . - [ ]",
}


def _to_spec_error(e: ValidationError, doc: Any, file: str) -> SpecError:
    errs = e.errors(include_url=False)
    err = next((x for x in errs if x["type"] == "extra_forbidden"), errs[0])  # a typo explains "missing" too
    loc = tuple(err["loc"])
    mark, path, parent, last = _locate(doc, loc)
    typ = err["type"]
    msg = err["msg"]
    fix = _FIXES.get(typ)
    if typ == "extra_forbidden":
        valid = [k for k in _valid_keys(parent if isinstance(parent, dict) else None, loc) if k != "kind"]
        s = _suggest(str(last), valid)
        twice = _alias_twice(str(last), parent, loc)
        msg = twice or f"unknown key {last!r}"
        fix = "keep one of them" if twice else _negated_flag(str(last), loc) or \
            (f"did you mean {s!r}?" if s else "valid keys: " + ", ".join(valid))
    elif typ == "union_tag_invalid":
        kind = parent.get("kind") if isinstance(parent, dict) else None
        cur = doc
        for el in loc:
            try:
                cur = cur[el]
            except (KeyError, IndexError, TypeError):
                break
        kind = cur.get("kind") if isinstance(cur, dict) else kind
        s = _suggest(str(kind), list(OP_MODELS))
        msg = f"unknown op kind {kind!r}"
        fix = f"did you mean {s!r}?" if s else "kinds: " + ", ".join(OP_MODELS)
        if isinstance(cur, LDict):
            mark = cur.key_marks.get("kind", mark)
            path = cur.get("__path__", path) + ".kind"
    elif typ == "union_tag_not_found":
        msg = "op has no `kind`"
        fix = "add kind: one of " + ", ".join(OP_MODELS)
    elif typ == "value_error":
        msg = msg.removeprefix("Value error, ")
        fix = fix or msg
    elif typ == "literal_error":
        fix = "write " + msg.removeprefix("Input should be ")
    if "input" in err and typ not in ("extra_forbidden", "missing", "union_tag_invalid", "union_tag_not_found") \
            and not isinstance(err["input"], (dict, list)):
        got = repr(err["input"])
        msg += f" (got {got if len(got) <= 60 else got[:57] + '...'})"
    if typ == "value_error" and fix == msg:
        fix = "see `schedsim schema` for this field's type and range"
    fix = fix or "see `schedsim schema` (or docs/schedule_language.md) for this field's type and range"
    if typ == "missing":
        msg = f"missing required field {str(last)!r}"
    return SpecError(msg, file=file, line=mark[0] if mark else None, column=mark[1] if mark else None,
                     path=path or None, fix=fix)


def _pipeline_line(e: SpecError, doc: Any) -> SpecError:
    """``e``, an error of the ``pipeline:`` block's validation (path ``pipeline.<key>...``, no line), with the
    line and column of that key's value and the value it got; for a field of :data:`_ORDER_KEYS` whose value
    (from a parameter, e.g. ``--set m=chunks_per_rank``) names :data:`CHUNKS_NAME`, the error that says it cannot
    be used there. Any other error unchanged."""
    blk = doc.get("pipeline") if isinstance(doc, Mapping) else None
    parts = (e.path or "").split(".")
    if e.line is not None or parts[0] != "pipeline" or len(parts) < 2 or not isinstance(blk, LDict):
        return e
    key = parts[1]
    mark = blk.key_marks.get(key, blk.mark)
    if key in _ORDER_KEYS and _uses_chunks(blk.get(key)):
        return _chunks_in_order_field(e.file or "<schedule>", key, mark)
    got = blk.get(key)
    msg = e.message + (f" (got {printable(repr(got), 60)})" if len(parts) == 2 and not isinstance(got, (dict, list))
                       else "")
    return SpecError(msg, file=e.file, line=mark[0] if mark else None, column=mark[1] if mark else None,
                     path=e.path, fix=e.fix, detail=e.detail)


def _has_synchronize(data: Any) -> bool:
    """Whether the document's ``ops`` (before expansion) hold a ``kind: synchronize`` entry, at any depth."""
    stack = [data.get("ops")] if isinstance(data, Mapping) else []
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, Mapping):
            if x.get("kind") == "synchronize":
                return True
            stack.extend(v for k, v in x.items() if k == "ops")
    return False


def load_text(text: str, file: str = "<string>", overrides: Mapping[str, Any] | None = None) -> ScheduleSpec:
    """Load a schedule from YAML text. See :func:`load_schedule`."""
    data = parse_yaml(text, file)
    rows = _ops_file(data, file)
    # a `synchronize` entry tags the next op of its ranks (schedsim.lower.written): every op entry one by one
    doc = expand(data, file, overrides, blocks=not _has_synchronize(data))
    if rows:
        from schedsim.spec.limits import _refuse, limit

        n = len(doc.get("ops") or ()) + len(rows)
        if n > limit("SCHEDSIM_MAX_OPS"):  # the expansion counted the written ops only
            raise _refuse(file, "the ops and the ops_file's rows are too many op entries", n, "SCHEDSIM_MAX_OPS",
                          "ops_file")
        doc["ops"] = [*(doc.get("ops") or []), *rows]
    with_rows = doc.get("ops") if rows else None
    if any(isinstance(x, Block) for x in doc.get("ops") or ()):
        spec = _load_blocks(doc, file)
        if spec is not None:
            return spec
        doc = expand(data, file, overrides)  # something is wrong: the general path finds and words it
    try:
        from schedsim.spec.validation import op_sources

        n_rows = len(rows) if with_rows is not None and doc.get("ops") is with_rows else 0
        spec = ScheduleSpec.model_validate(_strip_doc(doc, n_rows), context={
            "file": file, "sources": op_sources(doc), "env_lines": _env_lines(doc)})
    except ValidationError as e:
        raise _to_spec_error(e, doc, file) from None
    except SpecError as e:
        raise _pipeline_line(e, doc) from None
    from schedsim.spec.validation import check_spec  # cross-field rules

    check_spec(spec, doc, file)
    return spec


def _ops_file(data: Any, file: str) -> list[dict[str, Any]]:
    """The ops of a top-level ``ops_file:`` (removed from ``data``): a JSON list of op mappings, literal values
    only (no expressions, ``foreach`` or ``when``), appended after the written ``ops``. Its path is relative to
    the schedule's folder. ``schedsim import`` writes one (``schedule.ops.json``) beside ``schedule.yaml``: JSON
    parses in C, so a trace of 10^5-10^6 ops loads in seconds where YAML nodes cost ~0.5 ms an op, and
    the YAML node limit does not apply to it.

    The file is read as a schedule input (:func:`schedsim.io.read_input`: regular files only, the schedule's size
    cap or ``SCHEDSIM_MAX_INPUT_BYTES``) and parsed by :func:`schedsim.io.parse_json` (its depth limit); its rows
    count in the op limit (``--max-ops``, :func:`load_text`).

    Raises
    ------
    SpecError
        The key is not a path, the file is missing, special, too large, not JSON or not a list of mappings.
    """
    if not isinstance(data, dict) or "ops_file" not in data:
        return []
    rel = data.pop("ops_file")
    if not isinstance(rel, str) or not rel:
        raise SpecError("ops_file must be a path (relative to the schedule)", file=file, path="ops_file",
                        fix="write e.g. ops_file: schedule.ops.json")
    base = Path(file).parent if file != "<string>" else Path.cwd()
    target = base / rel
    from schedsim.io import parse_json, read_input

    try:
        raw = read_input(target, "schedule")
        rows = parse_json(raw, target, "schedule")
    except SpecError as e:  # worded on the schedule's ops_file field, with the JSON file's line when known
        at = "".join(f":{n}" for n in (e.line, e.column) if n is not None)
        raise SpecError(f"{printable(rel)}{at}: {e.message}", file=file, path="ops_file",
                        fix=e.fix) from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SpecError(f"ops_file {rel}: not a JSON list of op mappings", file=file, path="ops_file",
                        fix="write a JSON list of op mappings ({\"name\": ..., \"kind\": ...})")
    if any(k in raw for k in _LOADER_KEYS):  # the loader's own keys, which _strip drops, may be written there
        rows = _strip(rows)
    return rows


#: Text of an ops file that may hold the loader's keys ``__path__`` / ``__env__`` (a ``\u`` escape may spell them).
_LOADER_KEYS = (b"__path__", b"__env__", b"\\u")


def _strip_doc(doc: Any, n_rows: int) -> Any:
    """``_strip(doc)`` with its last ``n_rows`` ops, an ops file's rows (:func:`_ops_file`: plain JSON without the
    loader's keys), taken as they are: copying 10^5-10^6 rows would cost seconds and their size in memory while
    pydantic validates them."""
    if not n_rows:
        return _strip(doc)
    ops = doc["ops"]
    keep = len(ops) - n_rows
    out = {}
    for k, v in doc.items():
        if k == "ops":
            out[k] = [*_strip(ops[:keep]), *ops[keep:]]
        elif k != "__path__" and k != "__env__":
            out[k] = _strip(v)
    return out


def _env_lines(doc: Any) -> dict[str, int]:
    """The line of each key of the document's ``env:`` mapping (for errors that name a setting there)."""
    env = doc.get("env") if isinstance(doc, dict) else None
    return {str(k): m[0] for k, m in getattr(env, "key_marks", {}).items() if m}


def _pair_repeats(names: list[str] | Codes, ranks: list[Any]) -> bool:
    """Whether a (name, rank) pair repeats among ``names`` (a list, or :class:`~schedsim.coded.Codes` whose
    table is numbered instead of its rows) and the ranks ``ranks`` (int64 arrays, joined: one per name), by
    integer keys (the names numbered by a dict) rather than a set of a million tuples."""
    import numpy as np

    from schedsim.arrays import repeats

    if not len(names):
        return False
    # each name's code: the position of its first use (one dict pass; equal names, equal codes, as ids need)
    first: dict[str, int] = {}
    if isinstance(names, Codes):
        vals = names.values.tolist()
        code = np.fromiter(map(first.setdefault, vals, itertools.count()), np.int64, len(vals))[names.codes]
    else:
        code = np.fromiter(map(first.setdefault, names, itertools.count()), np.int64, len(names))
    rank = np.concatenate(ranks)
    w = int(rank.max()) + 1
    return repeats(code * w + rank, (int(code.max()) + 1) * w)


def _load_blocks(doc: LDict, file: str) -> ScheduleSpec | None:
    """The spec of an expanded document holding :class:`Block` s, its ``ops`` kept as a :class:`Layout`; None
    when a rule is broken (the caller loads the schedule by the general path, which raises the error).

    Pydantic and the cross-field rules (:func:`~schedsim.spec.validation.check_spec`) check the schedule with
    each block replaced by its representatives; the per-row fields (``name``, ``deps``) were checked in bulk
    by :func:`_block`, and op names must be unique across all rows.
    """
    import numpy as np

    from schedsim.spec.validation import check_spec, op_sources

    ops = doc["ops"]
    rep_ops = LList()
    rep_ops.mark = ops.mark
    spans = []
    for item in ops:
        start = len(rep_ops)
        for op in item.reps if isinstance(item, Block) else (item,):
            rep_ops.append(op)
            rep_ops.item_marks.append(op.mark)
        spans.append((item, start, len(rep_ops)))
    rep_doc = LDict(doc)
    rep_doc.mark, rep_doc.key_marks = doc.mark, doc.key_marks
    rep_doc["ops"] = rep_ops
    sources = op_sources(rep_doc)
    try:
        spec = ScheduleSpec.model_validate(_strip(rep_doc), context={"file": file, "sources": sources,
                                                                     "env_lines": _env_lines(doc)})
        check_spec(spec, rep_doc, file)
    except (ValidationError, SpecError):
        return None
    models = spec.__dict__["ops"]
    if any(isinstance(item, Block) and any(isinstance(m, CollectiveOp) and m.ranks is not None and len(m.ranks) == 1
                                           and m.group is None for m in models[a:b]) for item, a, b in spans):
        return None  # one entry per rank forms one collective with the same names elsewhere: the general path
    block_names: list[str] = []
    on_names: list[Codes] = []  # the names of the block rows that run on one rank
    on_ranks: list[Any] = []  # and their ranks (int64 arrays)
    other_names: set[str] = set()
    items: list[Any] = []
    srcs: list[Any] = []
    for item, a, b in spans:
        if isinstance(item, Block):
            item.models, item.sources = models[a:b], sources[a:b]
            one = [m.ranks[0] if m.ranks is not None and len(m.ranks) == 1 else -1 for m in item.models]
            if all(r >= 0 for r in one):
                on_names.append(item.name_codes)
                on_ranks.append(np.asarray(one, np.int64)[np.asarray(item.row_rep, np.int64)])
            else:
                block_names.extend(item.names.tolist())
            items.append(item)
            srcs.append(None)
        else:
            other_names.add(models[a].name)
            items.append(models[a])
            srcs.append(sources[a])
    names = set(block_names)
    on = Codes.cat(on_names) if on_names else Codes.of(None, 0)
    if len(names) != len(block_names) or not names.isdisjoint(other_names) or \
            _pair_repeats(on, on_ranks) or ((names or other_names) and not
                                            (names | other_names).isdisjoint(on.values[on.first_used()].tolist())):
        return None  # a block row's name used twice on a rank (check_spec saw the other ops)
    spec.__dict__.pop("ops")
    private = spec.__pydantic_private__
    assert private is not None
    private["_sources"] = []
    private["_layout"] = Layout(items, srcs)
    return spec


def load_schedule(path: str | Path, overrides: Mapping[str, Any] | None = None) -> ScheduleSpec:
    """Read, expand and validate a schedule file.

    Parameters
    ----------
    path : str or Path
        The schedule YAML.
    overrides : mapping, optional
        ``--set`` values for ``params``.

    Returns
    -------
    ScheduleSpec

    Raises
    ------
    SpecError
        If the file is missing, not a regular file, past its size cap, not UTF-8
        (:func:`schedsim.io.read_text_input`), is not valid YAML, or breaks a rule
        of the schedule language. The message names the file, line, column,
        field path and a fix.
    """
    from schedsim.io import read_text_input

    return load_text(read_text_input(path, "schedule"), str(path), overrides)
