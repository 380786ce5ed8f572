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
"""

from __future__ import annotations

import ast
import difflib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from schedsim.errors import SpecError, printable
from schedsim.expr import ExprError, _short, compile_expr, compile_interpolate, evaluate, interpolate
from schedsim.spec.limits import MAX_YAML_DEPTH
from schedsim.spec.model import COLLECTIVE_KINDS, NAME_PATTERN, NUMERIC_FIELDS, OP_MODELS, ScheduleSpec
from schedsim.tags import TagSet

__all__ = ["load_schedule", "load_text", "parse_overrides", "parse_value", "expand"]

Mark = tuple[int, int]


class LDict(dict):
    """A dict that remembers where it and each key came from (1-based line, column)."""

    mark: Mark | None = None
    key_marks: dict[str, Mark]

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.key_marks = {}


class LList(list):
    """A list that remembers where it and each item came from (1-based line, column)."""

    mark: Mark | None = None
    item_marks: list[Mark | None]

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.item_marks = []


def _mark(node: yaml.Node) -> Mark:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


MAX_NODES = 2_000_000
"""Most YAML nodes that aliases may add to a schedule (or a ``--set`` value, or a profile) when expanded,
beyond the nodes written in the text and ``ALIAS_NODES`` per alias written (guards against alias bombs; a
long literal schedule is not one, nor one whose every op repeats a small aliased list)."""

ALIAS_NODES = 16
"""Nodes each alias written may add beyond ``MAX_NODES`` (``deps: *d`` of up to 15 names in every op of a
schedule within ``SCHEDSIM_MAX_OPS``): at most 8 per character of text (an alias is 2 characters or more),
so what the allowance adds stays linear in the text, where nested aliases grow exponentially."""


def _check_expansion(root: yaml.Node, file: str, text: str) -> None:
    """Refuse a document whose aliases expand it by more than ``MAX_NODES`` nodes, plus ``ALIAS_NODES`` per
    alias written, beyond the distinct nodes of its text (``text``: what was composed into ``root``), from the composed node graph (shared by its aliases)
    in one pass over its distinct nodes: a "billion laughs" of 9 levels of 9 aliases is refused at once, where
    constructing it up to this many nodes takes seconds, and a literal schedule of a million
    written ops is not refused whatever its size. A text without ``&`` has no anchors, hence no aliases, and is
    not walked at all. Counts saturate past ``MAX_NODES`` plus the most nodes the text can hold (two per
    character: a mapping and its first key start at the same place), so a chain of aliases doubling 10,000
    times builds no 10,000-bit integers; an alias back to a collection that holds it (``&a [1, *a]``) counts 0
    here and is refused by :func:`_construct`'s depth limit. Names the root entry (key or value) whose
    expansion crosses the limit."""
    if "&" not in text:
        return
    cap = MAX_NODES + (2 + ALIAS_NODES) * len(text) + 3
    refs = 0  # references from collections to their items, each alias one more
    size: dict[int, int] = {}
    on_path: set[int] = set()  # the collections being counted, root to here (a depth-first walk)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in size:
            continue
        if isinstance(node, yaml.ScalarNode):
            size[id(node)] = 1
            continue
        kids = [c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode) else node.value
        if children_done:
            refs += len(kids)
            size[id(node)] = min(cap, 1 + sum(size.get(id(c), 0) for c in kids))  # 0: an alias to an ancestor
            on_path.discard(id(node))
        elif id(node) not in on_path:
            on_path.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in kids if id(c) not in size)
    written = len(size)  # the distinct nodes: what the text holds without its aliases expanded
    allowed = MAX_NODES + ALIAS_NODES * (refs - (written - 1))  # refs - (written - 1): the aliases written
    if size[id(root)] - written <= allowed:
        return
    total, at = 1, root
    parts = [c for kv in root.value for c in kv] if isinstance(root, yaml.MappingNode) else root.value
    for c in parts:
        total += size.get(id(c), 0)
        if total - written > allowed:
            at = c
            break
    raise SpecError(f"the YAML expands to more than {MAX_NODES:,} nodes beyond those written (aliases repeated too "
                    "deep?)", file=file, line=_mark(at)[0], column=_mark(at)[1],
                    fix="write the schedule with foreach/params instead of nested YAML aliases")


def _construct(node: yaml.Node, file: str, depth: int = 0) -> Any:
    """The document as :class:`LDict` / :class:`LList` with marks. Its size is bounded by
    :func:`_check_expansion`, run first on every path; a recursive alias stops at the depth limit."""
    if depth > MAX_YAML_DEPTH:
        raise SpecError(f"the YAML nests lists/mappings more than {MAX_YAML_DEPTH} levels deep", file=file,
                        line=_mark(node)[0], column=_mark(node)[1],
                        fix="write ops as a flat list (use foreach for repetition); check for unclosed [ or {")
    if isinstance(node, yaml.MappingNode):
        d = LDict()
        d.mark = _mark(node)
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode):  # `? [a, b]`: no schedule key is a list or a mapping
                raise SpecError("a mapping key is a list or a mapping", file=file, line=_mark(knode)[0],
                                column=_mark(knode)[1], fix="write the key as a plain name or number")
            key = _construct(knode, file, depth + 1)
            if not isinstance(key, str):
                key = str(key)
            if key in d:
                raise SpecError(
                    f"duplicate key {key!r}", file=file, line=_mark(knode)[0], column=_mark(knode)[1],
                    fix="remove one of the two entries",
                )
            d[key] = _construct(vnode, file, depth + 1)
            d.key_marks[key] = _mark(vnode)
        return d
    if isinstance(node, yaml.SequenceNode):
        lst = LList()
        lst.mark = _mark(node)
        for item in node.value:
            lst.append(_construct(item, file, depth + 1))
            lst.item_marks.append(_mark(item))
        return lst
    assert isinstance(node, yaml.ScalarNode)
    try:
        return _scalar(node)
    except ValueError:  # an integer of more than 4,300 digits (Python's int limit; no schedule number needs it)
        _SCALAR_LOADER.constructed_objects.clear()
        raise SpecError(f"a number of {len(node.value):,} characters is too long to read", file=file,
                        line=_mark(node)[0], column=_mark(node)[1],
                        fix="write the number in at most 4,300 digits (or as a float: 1e30)") from None
    except yaml.YAMLError as e:  # an unknown tag (`!foo`), a bad !!int ...
        _SCALAR_LOADER.constructed_objects.clear()
        raise SpecError(f"invalid YAML value: {getattr(e, 'problem', None) or e}", file=file,
                        line=_mark(node)[0], column=_mark(node)[1],
                        fix="remove the `!tag` in front of the value (schedules use plain YAML values)") from None


_SCALAR_LOADER = yaml.SafeLoader("")


_STR_TAG = "tag:yaml.org,2002:str"
_SHARED_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "null"))


def _scalar(node: yaml.ScalarNode) -> Any:
    """The value of a scalar node, as ``yaml.safe_load`` makes it; a string (the tag the resolver gave most
    scalars of a schedule) is the node's text itself, as ``SafeConstructor.construct_yaml_str`` returns it,
    without a pass through the constructor (half the time of constructing a literal schedule's scalars)."""
    if node.tag == _STR_TAG:
        return node.value
    value = _SCALAR_LOADER.construct_object(node, deep=True)
    _SCALAR_LOADER.constructed_objects.clear()
    return value


class _Unsettled(Exception):
    """:func:`_construct_events` met what it leaves to the composing path (an alias, an error of any kind)."""


def _construct_events(text: str, loader: Any) -> Any:
    """The document of an anchor-free ``text`` as :func:`_construct` makes it from the composed node graph (the
    same values, marks, key order, string keys), built from libyaml's parse events without composing the graph:
    the graph of a literal schedule holds nine nodes and eighteen marks per op, 5 GB at a million ops, where the
    events pass one at a time. Tags of lists and mappings are ignored, as :func:`_construct` ignores them; a
    scalar's tag is resolved as the composer resolves it. Anything :func:`_construct` would refuse (a
    duplicate key, a list or mapping as a key, nesting past ``MAX_YAML_DEPTH``, a value it cannot construct),
    an alias, a second document or a syntax error raises :class:`_Unsettled`, and the caller composes the text
    so that the error is worded as before.

    Raises
    ------
    _Unsettled
        As above.
    """
    build = _EventTree()
    try:
        parser = loader(text)
    except Exception:  # noqa: BLE001 - a lone surrogate, which libyaml cannot encode
        raise _Unsettled from None
    try:
        while True:
            ev = parser.get_event()
            cls = type(ev)
            if cls is yaml.StreamEndEvent:
                break
            if cls is yaml.MappingEndEvent or cls is yaml.SequenceEndEvent:
                build.stack.pop()
                build.keys.pop()
            elif cls is yaml.ScalarEvent:
                build.add(build.scalar(ev), ev, False)
            elif cls is yaml.MappingStartEvent:
                build.add(LDict(), ev, True)
            elif cls is yaml.SequenceStartEvent:
                build.add(LList(), ev, True)
            elif cls is yaml.AliasEvent or (cls is yaml.DocumentStartEvent and build.root is not _UNSET):
                raise _Unsettled  # an alias, a second document
    except _Unsettled:
        raise
    except Exception:  # noqa: BLE001 - whatever failed is worded by the composing path
        _SCALAR_LOADER.constructed_objects.clear()
        raise _Unsettled from None
    finally:
        parser.dispose()
    return LDict() if build.root is _UNSET else build.root


_UNSET = object()


class _EventTree:
    """The document :func:`_construct_events` builds, one event at a time."""

    def __init__(self) -> None:
        self.root: Any = _UNSET
        self.stack: list[Any] = []  # the open collections, outermost first
        self.keys: list[Any] = []  # per open collection: a mapping's key waiting for its value, else _UNSET
        self.tags: dict[tuple[str, Any], str] = {}  # (text, implicit) -> the tag resolved for a plain scalar
        self.seen: dict[tuple[str, Any, str], Any] = {}  # (text, implicit, tag) -> value, for values not str

    def scalar(self, ev: Any) -> Any:
        """The value of a scalar event, as :func:`_scalar` makes it of the composed node."""
        tag = ev.tag
        if tag is None or tag == "!":
            tag = self.tags.get((ev.value, ev.implicit))
            if tag is None:
                tag = _SCALAR_LOADER.resolve(yaml.ScalarNode, ev.value, ev.implicit)
                if len(self.tags) < 4096:
                    self.tags[ev.value, ev.implicit] = tag
        if tag == _STR_TAG:
            return ev.value
        at = (ev.value, ev.implicit, tag)  # an int, float, bool, null is immutable: one value per distinct text
        value = self.seen.get(at, self.seen)
        if value is self.seen:
            value = _scalar(yaml.ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, style=ev.style))
            if tag in _SHARED_TAGS and len(self.seen) < 4096:
                self.seen[at] = value
        return value

    def add(self, value: Any, ev: Any, collection: bool) -> None:
        """Put ``value`` in the open collection (a mapping's key, or the value of its waiting key)."""
        mark = (ev.start_mark.line + 1, ev.start_mark.column + 1)
        stack, keys = self.stack, self.keys
        if len(stack) > MAX_YAML_DEPTH:
            raise _Unsettled
        if not stack:
            self.root = value
        elif type(stack[-1]) is LList:
            stack[-1].append(value)
            stack[-1].item_marks.append(mark)
        elif keys[-1] is _UNSET:
            key = value if isinstance(value, str) else str(value)
            if collection or key in stack[-1]:
                raise _Unsettled
            keys[-1] = key
        else:
            stack[-1][keys[-1]] = value
            stack[-1].key_marks[keys[-1]] = mark
            keys[-1] = _UNSET
        if collection:
            value.mark = mark
            stack.append(value)
            keys.append(_UNSET)


def parse_yaml(text: str, file: str) -> Any:
    """Parse YAML text into nested :class:`LDict` / :class:`LList` with source marks.

    The text is composed by libyaml when PyYAML has it (``CSafeLoader``: the same resolver and constructors,
    the same node marks): 10x faster than the pure-Python parser, which composed allgather_mm8.yaml in
    4.5 ms, ~1.5% of a cold ``check``. A text that fails there in any way (a syntax error, or
    one of the errors below) but an expansion past ``MAX_NODES`` (:func:`_check_expansion`, the same nodes
    and marks either way) is read again by the pure-Python parser, so errors are worded exactly as
    before: libyaml's marks lack PyYAML's snippet, and it composes nestings too deep for PyYAML's
    recursion. A text with a tab goes straight to the pure-Python parser: libyaml takes a tab between
    tokens (after ``name:``, after a comma in ``[a, b]``) where that parser refuses it, and a schedule
    must not be valid only where PyYAML was built with libyaml. So does a byte-order mark (U+FEFF) after the
    text's first character: libyaml drops it before a document's first content too, so ``---`` or a comment
    line, then ``\ufeffname:``, read as the key ``name``, which the pure-Python parser keeps as a key of its
    own (found by a differential fuzz of the two parsers; the one other difference it found is
    the column of an empty value inside ``[ ]``, one apart).
    A lone surrogate, which libyaml cannot encode, is named by that parser too.
    A text without ``&`` (no anchor, hence no alias) is built from libyaml's parse events by
    :func:`_construct_events`, without composing its node graph; whatever that leaves (an error, an alias)
    takes the composing path below, so values, marks and errors are the same either way.

    Raises
    ------
    SpecError
        On YAML syntax errors, with the line and column of the problem.
    """
    too_deep = SpecError(f"the YAML nests lists/mappings too deep (more than about {MAX_YAML_DEPTH} levels are "
                         "refused)", file=file, fix="write ops as a flat list; check for unclosed [ or {")
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is not None and "\t" not in text and "\ufeff" not in text[1:]:
        if "&" not in text:  # no anchor, hence no alias to expand: built from the parse events
            try:
                return _construct_events(text, loader)
            except _Unsettled:
                pass
        try:
            node = yaml.compose(text, Loader=loader)
        except yaml.YAMLError as e:
            if "maximum nesting depth" in str(e):  # libyaml's own limit, 1000 levels: no second parse (~1 s)
                raise too_deep from None
            node = False
        except (RecursionError, UnicodeEncodeError):
            node = False
        if node is None:
            return LDict()
        if node is not False:
            # the same nodes and marks as the pure-Python parser's: an expansion past the limit is refused here,
            # without composing the text a second time (a 7 MB alias chain took 23 s with the second pass)
            _check_expansion(node, file, text)
            try:
                return _construct(node, file)
            except (SpecError, RecursionError):
                pass
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:  # PyYAML composes nested collections recursively
        raise too_deep from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise SpecError(
            f"invalid YAML: {problem}",
            file=file,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
            fix=('quote strings that hold {expr} inside [ ] or { } lists, e.g. deps: ["ag{i}"]'
                 if "but got '{'" in str(problem) or "but got '}'" in str(problem)
                 else "check indentation and quoting around this position; a [ or { may be left unclosed"),
        ) from None
    if node is None:
        return LDict()
    _check_expansion(node, file, text)
    return _construct(node, file)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Parse ``--set key=value`` strings; values are read as YAML scalars.

    Raises
    ------
    SpecError
        If an item has no ``=``.

    Examples
    --------
    >>> parse_overrides(["chunks=4", "dtype=fp16"])
    {'chunks': 4, 'dtype': 'fp16'}
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SpecError(f"--set {_short(item)} is not key=value", fix="write e.g. --set chunks=4")
        k, v = item.split("=", 1)
        k = k.strip()
        out[k] = parse_value(v, f"--set {printable(k, 80)}") if v.strip() else ""
    return out


def parse_value(text: str, where: str) -> Any:
    """One value written on the command line (``--set k=VALUE``), read as YAML under the guards of a schedule
    file (:func:`_check_expansion`'s alias limit, the depth limit, recursive aliases refused): a scalar, or a
    list/mapping. Text that is not YAML (``a: b: c``) stays the string as written.

    Raises
    ------
    SpecError
        Naming ``where``: an alias bomb, nesting past the depth limit, or a recursive alias.
    """
    bad = next((c for c in text if "\ud800" <= c <= "\udfff"), None)
    if bad is not None:  # bytes of the command line that are not UTF-8 (Python keeps them as lone surrogates)
        raise SpecError(f"the value holds bytes that are not UTF-8 text ({bad.encode('utf-8', 'surrogateescape')!r})",
                        file=where, fix="write the value in UTF-8 (check the terminal's encoding)")
    deep = SpecError(f"the value nests lists/mappings more than {MAX_YAML_DEPTH} levels deep", file=where,
                     fix="write a flat value, e.g. --set chunks=4 or --set sizes=[1,2,4]")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        node = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as e:
        if "nesting depth" in str(e):  # libyaml's own limit (1000 levels)
            raise deep from None
        return text
    except RecursionError:
        raise deep from None
    if node is None:
        return None
    _check_expansion(node, where, text)
    value = _construct(node, where)
    return _strip(value) if isinstance(value, (LDict, LList)) else value


class _Ctx:
    def __init__(self, file: str, blocks: bool = True) -> None:
        self.file = file
        self.blocks = blocks  # a plain foreach body may become a Block (see _run_foreach)
        # what the expansion has really produced so far (the estimate of limits.check_expansion cannot see
        # loop ranges that depend on outer loop variables, nor strings built from parameters)
        self.entries = 0
        self.chars = 0
        self.visits = 0
        from schedsim.spec.limits import limit

        self.max_ops = limit("SCHEDSIM_MAX_OPS")
        self.max_chars = limit("SCHEDSIM_MAX_CHARS")
        self.plans: dict[int, _Plan] = {}  # id(op entry as written) -> its compiled form, see _plan
        self.small_blocks: dict[int, int] = {}  # id(foreach body as written) -> small blocks built of it

    def plan(self, item: Mapping[str, Any]) -> _Plan:
        """The compiled form of one op entry as written (made on first use, then reused every iteration)."""
        pl = self.plans.get(id(item))
        if pl is None or pl.item is not item:
            pl = self.plans[id(item)] = _Plan(item)
        return pl

    def count(self, op: Mapping[str, Any], mark: Mark | None, path: str) -> None:
        """Count one produced op entry and its string characters; refuse past ``--max-ops`` / the char limit."""
        self.entries += 1
        self.chars += sum(len(v) for v in op.values() if isinstance(v, str))
        if self.entries > self.max_ops:
            raise self.err(f"the ops expand to more than {self.max_ops:,} entries (a loop range that depends on an "
                           "outer loop variable is not seen by the estimate before expanding)", mark, path,
                           fix="make the loops smaller; if you mean it, raise the limit with --max-ops "
                           "(or the environment variable SCHEDSIM_MAX_OPS)")
        if self.chars > self.max_chars:
            raise self.err(f"the expanded op names and strings pass {self.max_chars:,} characters in all (a long "
                           "parameter string repeated in every op?)", mark, path,
                           fix="use shorter names/streams; if you mean it, raise the environment variable "
                           "SCHEDSIM_MAX_CHARS")

    def visit(self, mark: Mark | None, path: str) -> None:
        """Count one loop iteration (also those a `when:` drops), so that nested loops stay bounded."""
        self.visits += 1
        if self.visits > self.max_ops:
            raise self.err(f"the foreach loops run more than {self.max_ops:,} iterations in all", mark, path,
                           fix="make the loops smaller; if you mean it, raise the limit with --max-ops "
                           "(or the environment variable SCHEDSIM_MAX_OPS)")

    def err(self, msg: str, mark: Mark | None, path: str, fix: str | None = None) -> SpecError:
        return SpecError(
            msg, file=self.file, line=mark[0] if mark else None, column=mark[1] if mark else None, path=path, fix=fix
        )


_Field = Any  # Callable[[env, mark], value] or None (evaluate with _eval_value)


def _compile_scalar(key: str, v: Any) -> Any:
    """``f(env)`` equal to ``_eval_value(key, v, env, ...)`` for a scalar ``v`` (raises ExprError the same way)."""
    if not isinstance(v, str):
        return lambda env: v
    if key in NUMERIC_FIELDS:
        return compile_expr(v.strip().removeprefix("{").removesuffix("}") if v.strip().startswith("{") else v)
    return compile_interpolate(v)


def _compile_field(key: str, v: Any) -> _Field:
    """Compile one field of an op entry: its expressions are parsed once, not once per ``foreach`` iteration.

    Returns ``f(env, mark)`` giving the same value as :func:`_eval_value`, or None where the field is left to
    :func:`_eval_value` (nested lists and mappings, an expression that does not parse: its error is then
    raised by :func:`_eval_value` with the file, line and field as before).
    """
    try:
        if key == "ranks":
            return _compile_ranks(v)
        if isinstance(v, dict):  # tags: {mb: "{i}"}; a nested key is read as a field of that name
            if any(isinstance(x, (list, dict)) for x in v.values()):
                return None
            subs = [(k2, _compile_scalar(k2 if key != "tags" else "tag", x)) for k2, x in v.items()]
            kms = dict(getattr(v, "key_marks", {}))

            def run_dict(env: Mapping[str, Any], mark: Mark | None) -> LDict:
                out = LDict()
                out.mark = getattr(v, "mark", mark)
                for k2, f in subs:
                    out[k2] = f(env)
                    out.key_marks[k2] = kms.get(k2, mark)  # type: ignore[assignment]
                return out

            return run_dict
        if isinstance(v, list):
            if any(isinstance(x, (list, dict)) for x in v):
                return None
            fns = [_compile_scalar(key, x) for x in v]
            item_marks = list(getattr(v, "item_marks", []))
            vmark = getattr(v, "mark", None)

            def run_list(env: Mapping[str, Any], mark: Mark | None) -> LList:
                sub = LList(f(env) for f in fns)
                sub.mark = vmark if vmark is not None or hasattr(v, "mark") else mark
                sub.item_marks = list(item_marks)
                return sub

            return run_list
        f = _compile_scalar(key, v)
        return lambda env, mark: f(env)
    except ExprError:
        return None


def _compile_ranks(v: Any) -> _Field:
    """``f(env, mark)`` equal to ``_eval_value("ranks", v, env, ...)``: None for all ranks, else the list of
    ranks (a lone int or ``{expr}`` giving one becomes a one-rank list)."""
    if v is None or (isinstance(v, str) and v == "all"):
        return lambda env, mark: None
    if isinstance(v, str):
        f = compile_expr(v.strip("{}"))

        def run(env: Mapping[str, Any], mark: Mark | None) -> Any:
            x = f(env)
            if isinstance(x, int):
                return [x]
            if isinstance(x, list):
                return [evaluate(y.strip("{}"), env) if isinstance(y, str) else y for y in x]
            return x

        return run
    if isinstance(v, int):
        return lambda env, mark: [v]
    if isinstance(v, list):
        fns = [compile_expr(y.strip("{}")) if isinstance(y, str) else (lambda env, y=y: y) for y in v]
        return lambda env, mark: [f(env) for f in fns]
    return lambda env, mark: v


class _Plan:
    """One op entry as written, compiled once: its fields' expressions, its `when`, whether it uses `rank`."""

    def __init__(self, item: Mapping[str, Any]) -> None:
        self.item = item  # kept alive so that its id is not reused while the plan is cached
        self.uses_rank = any(_RANK.search(str(v)) if k == "when" else _uses_rank(v, k) for k, v in item.items()
                             if k != "ranks")
        self.fields = [(k, _compile_field(k, v)) for k, v in item.items() if k != "when"]
        self.vec: dict[str, Any] = {}  # field -> its vectorised form (_vector_field), made on a block's first use
        self.when = None
        if "when" in item:
            try:
                self.when = compile_expr(str(item["when"]))
            except ExprError:
                pass  # evaluated (and reported) by the general path

    def for_copy(self, one: Mapping[str, Any]) -> _Plan:
        """The plan of ``one``, a copy of this entry with its own ``ranks`` (the per-rank instances): the same
        compiled fields but ``ranks``, which is evaluated from the copy (appended where the entry had none)."""
        pl = object.__new__(_Plan)
        pl.item, pl.uses_rank, pl.when, pl.vec = one, self.uses_rank, self.when, {}
        pl.fields = [(k, None if k == "ranks" else f) for k, f in self.fields]  # `ranks` is the copy's own
        if "ranks" not in self.item:
            pl.fields.append(("ranks", None))
        return pl


def _suggest(key: str, valid: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return close[0] if close else None


def _eval_value(key: str, value: Any, env: Mapping[str, Any], ctx: _Ctx, mark: Mark | None, path: str) -> Any:
    """Evaluate one field value of an op or of the top level."""
    try:
        if key == "ranks":
            if value == "all" or value is None:
                return None
            if isinstance(value, str):
                value = evaluate(value.strip("{}"), env)
            if isinstance(value, int):
                return [value]
            if isinstance(value, list):
                return [evaluate(v.strip("{}"), env) if isinstance(v, str) else v for v in value]
            return value
        if isinstance(value, str):
            if key in NUMERIC_FIELDS:
                return evaluate(value.strip().removeprefix("{").removesuffix("}") if value.strip().startswith("{") else value, env)
            return interpolate(value, env)
        if isinstance(value, list):
            sub = LList(_eval_value(key, v, env, ctx, mark, f"{path}[{i}]") for i, v in enumerate(value))
            sub.mark = getattr(value, "mark", mark)
            sub.item_marks = list(getattr(value, "item_marks", []))
            return sub
        if isinstance(value, dict):
            out = LDict()
            out.mark = getattr(value, "mark", mark)
            for k2, v2 in value.items():
                km = getattr(value, "key_marks", {}).get(k2, mark)
                out[k2] = _eval_value(k2 if key != "tags" else "tag", v2, env, ctx, km, f"{path}.{k2}")
                out.key_marks[k2] = km
            return out
        return value
    except ExprError as e:
        raise ctx.err(f"bad expression {_short(value) if isinstance(value, str) else _short(repr(value))}: {e}", mark, path,
                      fix=f"use parameters ({', '.join(sorted(k for k in env if not k.startswith('_'))) or 'none defined'}) "
                      "with + - * / // % ** and range/min/max") from None


def _expand_ops(items: Any, env: dict[str, Any], ctx: _Ctx, path: str, out: LList, index: int | None = None) -> None:
    """Expand a list of ops: `when`, groups, `foreach`, per-rank instances (`rank`), expressions.

    ``index`` is the position of ``items[0]`` in the list the user wrote (for one re-expanded op).
    """
    if not isinstance(items, list):
        raise ctx.err("`ops` must be a list", getattr(items, "mark", None), path, fix="write ops: as a YAML list of '- name: ...' entries")
    marks = getattr(items, "item_marks", [None] * len(items))
    for i, item in enumerate(items):
        if index is not None:
            i = index
            m = getattr(item, "mark", None)
        else:
            m = marks[i] if i < len(marks) else None
        p = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise ctx.err("each op must be a mapping", m, p, fix="write '- name: x\\n  kind: matmul ...'")
        km = getattr(item, "key_marks", {})
        op = _literal_op(item, km, m)
        if op is not None:  # nothing to evaluate: no per-entry plan (a literal schedule of a million ops)
            ctx.count(op, op.mark, p)
            op["__path__"] = p
            out.append(op)
            out.item_marks.append(op.mark)
            continue
        plan = ctx.plan(item)
        per_rank = "rank" not in env and "ops" not in item and "foreach" not in item and plan.uses_rank
        if ("ops" in item or "foreach" in item) and "rank" not in env and _RANK.search(str(item.get("when", ""))):
            # a group or foreach taken by some ranks only (`when: rank == 0`): expand it once per rank with `rank`
            # bound, keeping each resulting op on that rank alone
            if not isinstance(env.get("world_size"), int):
                raise ctx.err("`rank` in a group's `when` needs an integer world_size", km.get("when", m), p + ".when",
                              fix="set world_size")
            for r in range(env["world_size"]):
                mine = LList()
                _expand_ops(LList([item]), {**env, "rank": r}, ctx, path, mine, index=i)
                for op in mine:
                    if op.get("ranks") is None or r in op["ranks"]:
                        op["ranks"] = [r]
                        out.append(op)
                        out.item_marks.append(op.mark)
            continue
        if "when" in item and not per_rank:
            try:
                cond = plan.when(env) if plan.when is not None else evaluate(str(item["when"]), env)
            except ExprError as e:
                raise ctx.err(f"bad `when` expression {_short(str(item['when']))}: {e}", km.get("when", m), p + ".when",
                              fix="check the types of the parameters it uses (e.g. --set values)") from None
            if not cond:
                continue
        if "ops" in item and "foreach" not in item:
            _only_keys(item, {"ops", "when"}, "a group of ops", ctx, m, p,
                       "a group holds only `ops:` and `when:` (and `foreach:` to repeat it); put op fields on the ops "
                       "inside it")
            _expand_ops(item["ops"], env, ctx, p + ".ops", out)  # a conditional group (`when:` + `ops:`)
            continue
        if "foreach" in item:
            _only_keys(item, {"foreach", "ops", "when"}, "a foreach block", ctx, m, p,
                       "a foreach block holds only `foreach:`, `ops:` and optionally `when:`")
            loops = item["foreach"]
            if not isinstance(loops, dict) or not loops:
                raise ctx.err("`foreach` must map loop variables to ranges or lists", km.get("foreach", m), p + ".foreach",
                              fix="write foreach: {i: range(chunks)}")
            names, values = [], []
            lkm = getattr(loops, "key_marks", {})
            for var, spec in loops.items():
                try:
                    vals = evaluate(spec, env) if isinstance(spec, str) else spec
                    if isinstance(vals, list):
                        vals = [evaluate(v, env) if isinstance(v, str) and v.isidentifier() and v in env else v for v in vals]
                except ExprError as e:
                    raise ctx.err(f"bad loop range for {var!r}: {e}", lkm.get(var, m), f"{p}.foreach.{var}",
                                  fix="write e.g. range(chunks) or a list [a, b]") from None
                if isinstance(vals, int):
                    vals = list(range(vals))
                if not isinstance(vals, list):
                    raise ctx.err(f"loop variable {var!r} must range over a list, got {_short(repr(vals))}", lkm.get(var, m),
                                  f"{p}.foreach.{var}", fix="write e.g. range(chunks) or a list [a, b]")
                names.append(var)
                values.append(vals)
            if "ops" not in item:
                raise ctx.err("a foreach block needs an `ops:` list", m, p, fix="add ops: [...] under foreach")
            _run_foreach(item["ops"], names, values, env, ctx, km.get("foreach", m), p, out)
            continue
        if per_rank:
            # the op is instanced per rank: one entry per rank, with `rank` bound in its expressions
            ranks = _eval_value("ranks", item.get("ranks"), env, ctx, km.get("ranks", m), p + ".ranks")
            if ranks is None:
                if not isinstance(env.get("world_size"), int):
                    raise ctx.err("`rank` in an op for all ranks needs an integer world_size", m, p,
                                  fix="set world_size, or give the op `ranks:`")
                ranks = list(range(env["world_size"]))
            for r in ranks:
                one = LDict(item)
                one.mark = getattr(item, "mark", m)
                one.key_marks = dict(km)
                one["ranks"] = [r]
                ctx.plans[id(one)] = plan.for_copy(one)  # compiled once for all ranks, dropped after use
                _expand_ops(LList([one]), {**env, "rank": r}, ctx, path, out, index=i)
                del ctx.plans[id(one)]
            continue
        op = LDict()
        op.mark = getattr(item, "mark", m)
        for k, f in plan.fields:
            fm = km.get(k, m)
            try:
                op[k] = f(env, fm) if f is not None else _eval_value(k, item[k], env, ctx, fm, f"{p}.{k}")
            except ExprError:  # _eval_value evaluates it again and raises with the file, line, field and fix
                op[k] = _eval_value(k, item[k], env, ctx, fm, f"{p}.{k}")
            op.key_marks[k] = fm
        op.key_marks["__source__"] = m  # type: ignore[assignment]
        ctx.count(op, op.mark, p)
        op["__path__"] = p
        out.append(op)
        out.item_marks.append(op.mark)


def _only_keys(item: Mapping[str, Any], allowed: set[str], what: str, ctx: _Ctx, m: Mark | None, p: str,
               fix: str) -> None:
    """Refuse the first key of ``item`` (in sorted order) outside ``allowed``, as unknown in ``what``."""
    extra = set(item) - allowed
    if extra:
        k = sorted(extra)[0]
        raise ctx.err(f"unknown key {k!r} in {what}", getattr(item, "key_marks", {}).get(k, m), f"{p}.{k}", fix=fix)


def _literal(key: str, v: Any) -> bool:
    """Whether a scalar field value is its own value in every environment: not a string, or a string of no
    ``{expr}`` and no ``rank`` outside a numeric field (``NUMERIC_FIELDS`` are expressions even unbraced)."""
    if isinstance(v, str):
        return key not in NUMERIC_FIELDS and "{" not in v and "rank" not in v
    return not isinstance(v, (list, dict))


def _literal_op(item: Mapping[str, Any], km: Mapping[str, Any], m: Mark | None) -> LDict | None:
    """The op entry ``item`` as :func:`_expand_ops` expands it where no field holds an expression (scalars and
    lists of scalars, ``ranks`` as ints; no ``when``, ``ops``, ``foreach``): the same values, types and marks
    as the compiled fields of :class:`_Plan` give, without compiling them. None for any other entry."""
    op = LDict()
    op.mark = getattr(item, "mark", m)
    for k, v in item.items():
        if k in ("when", "ops", "foreach"):
            return None
        if k == "ranks":  # as _compile_ranks
            if v is None or v == "all":
                v = None
            elif isinstance(v, int):
                v = [v]
            elif isinstance(v, list) and not any(isinstance(y, (str, list, dict)) for y in v):
                v = list(v)
            else:
                return None
        elif isinstance(v, list):  # as _compile_field's run_list
            if not all(_literal(k, x) for x in v):
                return None
            sub = LList(v)
            sub.mark = getattr(v, "mark", m)
            sub.item_marks = list(getattr(v, "item_marks", []))
            v = sub
        elif not _literal(k, v):
            return None
        op[k] = v
        op.key_marks[k] = km.get(k, m)
    op.key_marks["__source__"] = m  # type: ignore[assignment]
    return op


def _run_foreach(ops: Any, names: list[str], values: list[list[Any]], env: dict[str, Any], ctx: _Ctx,
                 mark: Mark | None, p: str, out: LList) -> None:
    """Expand a foreach block's ``ops`` once per combination of its loop ``values`` (the cartesian product).

    A body of plain op entries (:func:`_plain_body`) outside any per-rank expansion becomes one :class:`Block`
    (the whole iteration space at once, see :func:`_block`) where that succeeds; otherwise, and to raise its
    errors, the body is expanded iteration by iteration.
    """
    bulk = ctx.blocks and TEMPLATES and "rank" not in env
    body = _plain_body(ops, "rank" in env or "rank" in names, ctx, p + ".ops", per_rank=bulk)
    if body is not None and bulk and _worth_a_block(ops, values, ctx):
        blk = _block(body, names, values, env, ctx)
        if blk is not None:
            if blk.rows:
                out.append(blk)
                out.item_marks.append(mark)
            return
    if body is not None and any(b[6] is not None for b in body):
        body = None  # an entry instanced per rank: the general path expands each iteration
    for combo in itertools.product(*values):
        ctx.visit(mark, p + ".foreach")
        it_env = {**env, **dict(zip(names, combo, strict=False))}
        if body is None or not _expand_plain(body, it_env, ctx, out):
            _expand_ops(ops, it_env, ctx, p + ".ops", out)


#: A block of fewer iterations than this is *small*: building it (vector fields, representatives validated as
#: in the general path) costs more than expanding its iterations one by one. An inner ``foreach`` is one block
#: per outer iteration; after :data:`SMALL_BLOCKS_KEPT` small blocks of one body, that body is expanded
#: iteration by iteration. ``benchmarks/speed/foreach_nested.py`` on the shared 2-core VM (load + lower,
#: two entries, 160,000 ops): 20,000 outer x 2 inner iterations took 8.9 CPU s as blocks, 3.8 s per iteration,
#: 2.8 s with this rule; 2,000 x 20 took 2.2 s as blocks, 3.4 s per iteration (both paths give the same
#: spec, tests/core/test_foreach_template.py).
SMALL_BLOCK = 8
SMALL_BLOCKS_KEPT = 32


def _worth_a_block(ops: Any, values: list[list[Any]], ctx: _Ctx) -> bool:
    """Whether the body ``ops`` (as written) is still built as a block for a loop over ``values``: not when
    it has already been built as :data:`SMALL_BLOCKS_KEPT` small blocks and this loop is small too."""
    if math.prod(map(len, values)) >= SMALL_BLOCK:
        return True
    seen = ctx.small_blocks.get(id(ops), 0)
    ctx.small_blocks[id(ops)] = seen + 1
    return seen < SMALL_BLOCKS_KEPT


def _plain_body(items: Any, rank_bound: bool, ctx: _Ctx, path: str,
                per_rank: bool = False) -> list[tuple[Any, ...]] | None:
    """A foreach body made only of plain op entries, compiled for :func:`_expand_plain`; else None.

    Plain: a mapping without ``ops``/``foreach``, not instanced per rank (with ``per_rank``, for a
    :class:`Block`, also one that is), whose fields and ``when`` all compiled (see :class:`_Plan`). Anything
    else is left to :func:`_expand_ops`, once per iteration. Each entry is ``(when, fields, key_marks, mark,
    path, item, ranks)``; ``ranks`` is None, or for an entry instanced per rank (``rank`` in its fields, as
    :func:`_expand_ops` instances it) its ``ranks`` field compiled (:func:`_compile_ranks`); its ``fields``
    are then those of each rank's copy (``ranks: [rank]``, in the place :meth:`_Plan.for_copy` gives it).
    """
    if not isinstance(items, list):
        return None
    marks = getattr(items, "item_marks", [None] * len(items))
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "ops" in item or "foreach" in item:
            return None
        plan = ctx.plan(item)
        mine = plan.uses_rank and not rank_bound
        if (mine and not per_rank) or ("when" in item and plan.when is None) \
                or any(f is None for k, f in plan.fields if not (mine and k == "ranks")):
            return None
        m = marks[i] if i < len(marks) else None
        km = getattr(item, "key_marks", {})
        ranks = None
        plan_fields = plan.fields
        if mine:  # as _expand_ops instances it: a copy per rank, its mark the entry's own
            try:
                ranks = _compile_ranks(item.get("ranks"))
            except ExprError:
                return None
            m = getattr(item, "mark", m)
            plan_fields = [(k, _rank_only if k == "ranks" else f) for k, f in plan.fields]
            if "ranks" not in item:
                plan_fields.append(("ranks", _rank_only))
        fields = [(k, f, km.get(k, m)) for k, f in plan_fields]
        key_marks = {k: fm for k, _, fm in fields}
        key_marks["__source__"] = m
        out.append((plan.when, fields, key_marks, getattr(item, "mark", m), f"{path}[{i}]", item, ranks))
    return out


def _rank_only(env: Mapping[str, Any], mark: Mark | None) -> list[int]:
    """The ``ranks`` of one rank's copy of an entry instanced per rank: ``[rank]``."""
    return [env["rank"]]


def _expand_plain(body: list[tuple[Any, ...]], env: dict[str, Any], ctx: _Ctx, out: LList) -> bool:
    """One iteration of a plain foreach body (:func:`_plain_body`): the ops :func:`_expand_ops` would append.

    Returns False, having appended and counted nothing, when an expression fails: the caller then expands the
    iteration with :func:`_expand_ops`, which raises the error with its file, line, field and fix.
    """
    n0, entries, chars = len(out), ctx.entries, ctx.chars
    try:
        for when, fields, key_marks, mark, p, _item, _ranks in body:
            if when is not None and not when(env):
                continue
            op = _plain_op(fields, key_marks, mark, env)
            ctx.count(op, mark, p)
            op["__path__"] = p
            out.append(op)
            out.item_marks.append(mark)
    except ExprError:
        del out[n0:], out.item_marks[n0:]
        ctx.entries, ctx.chars = entries, chars
        return False
    return True


def _plain_op(fields: list[tuple[str, Any, Mark | None]], key_marks: dict[str, Any], mark: Mark | None,
              env: Mapping[str, Any]) -> LDict:
    """One op entry of a plain body, its fields evaluated in ``env``, without ``__path__`` (raises ExprError)."""
    op = LDict()
    op.mark = mark
    for k, f, fm in fields:
        op[k] = f(env, fm)
    op.key_marks = dict(key_marks)
    return op


TEMPLATES = True
"""Carry a plain ``foreach`` body as one :class:`Block` of columns (False: expand it iteration by iteration, the
general path; the tests compare the two)."""


class _Abandon(Exception):
    """A block cannot be built in bulk: the body is expanded by the general path (which raises its errors)."""


class Block:
    """A ``foreach`` block of plain op entries, expanded over its whole iteration space at once.

    Rows are the op entries the general path would produce, in its order (iterations in the order of
    ``itertools.product``, each iteration's entries in the order written, ``when`` applied). Rows of one entry
    whose fields other than ``name``, ``deps`` and ``tags`` are equal share one *representative*: the op entry of the
    first such row, built by the general path's code (:func:`_plain_op`) and validated by pydantic with the
    rest of the schedule. A row runs on its representative's ``ranks``.

    Attributes
    ----------
    reps : list of LDict
        Representative op entries, in order of their first row; ``models`` holds them validated.
    rep_deps : list of bool
        Whether the representative's entry writes ``deps``.
    rows : int
        Number of rows R.
    row_rep : int64[R]
        Representative of each row.
    names : object[R]
        Op name of each row (str).
    dep_cnt : int64[R], deps : object[sum(dep_cnt)]
        Each row's ``deps`` (names, in the order written), concatenated row by row.
    tags : object[R]
        Each row's tags as ``tuple(sorted(tags.items()))`` (``()`` for none); ``rep_tags`` the keys of each
        representative's ``tags`` in the order written (None: not written).
    strs : dict of str to object[R]
        Per field of :data:`_ROW_STRS` (``p2p_batch``, ``nccl_group``, ``tag``), each row's value (None: not
        written); ``batch`` and ``msg`` each row's ``p2p_batch`` (either spelling) and ``tag``.
    """

    def __init__(self, reps: list[LDict], rep_deps: list[bool], rep_tags: list[list[str] | None], row_rep: Any,
                 names: Any, dep_cnt: Any, deps: Any, tags: Any, strs: dict[str, Any]) -> None:
        import numpy as np
        self.reps, self.rep_deps, self.rep_tags = reps, rep_deps, rep_tags
        self.rows = len(names)
        self.row_rep, self.names, self.dep_cnt, self.deps, self.tags = row_rep, names, dep_cnt, deps, tags
        self.strs = strs
        written = np.not_equal(strs["p2p_batch"], np.array(None, dtype=object)).astype(bool)
        self.batch: Any = np.where(written, strs["p2p_batch"], strs["nccl_group"])
        self.msg: Any = strs["tag"]
        self.models: list[Any] = []
        self.sources: list[tuple[int | None, int | None, str]] = []

    def ops(self) -> list[Any]:
        """The rows as pydantic op models, equal to what validating the general path's entries gives: each
        representative's model with the row's ``name`` (and ``deps``, ``tags``)."""
        import numpy as np
        out = []
        models, has_deps, tag_keys = self.models, self.rep_deps, self.rep_tags
        dptr = np.zeros(self.rows + 1, np.int64)
        np.cumsum(self.dep_cnt, out=dptr[1:])
        deps, dp = self.deps.tolist(), dptr.tolist()
        batch, msg = self.batch.tolist(), self.msg.tolist()
        for r, (j, name, tags) in enumerate(zip(self.row_rep.tolist(), self.names.tolist(), self.tags.tolist(),
                                                strict=True)):
            upd: dict[str, Any] = {"name": name}
            written = models[j].__pydantic_fields_set__  # the representative's are its first row's
            if "p2p_batch" in written:
                upd["p2p_batch"] = batch[r]
            if "tag" in written:
                upd["tag"] = msg[r]
            if has_deps[j]:
                upd["deps"] = deps[dp[r]:dp[r + 1]]
            if tag_keys[j] is not None:
                d = dict(tags)
                upd["tags"] = {k: d[k] for k in tag_keys[j]}  # in the order written
            out.append(_copy_with(models[j], upd))
        return out


def _copy_with(model: Any, update: dict[str, Any]) -> Any:
    """``model.model_copy(update=update)`` (pydantic 2: a shallow copy, ``update`` written over its fields and
    added to its set fields) without the generic machinery: an op model has no extra fields and no private
    attributes (``extra="forbid"``), so this is all that call does for it, at a third of the time."""
    new = object.__new__(type(model))
    d = model.__dict__.copy()
    d.update(update)
    setattr_ = object.__setattr__
    setattr_(new, "__dict__", d)
    setattr_(new, "__pydantic_extra__", None)
    setattr_(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    setattr_(new, "__pydantic_private__", None)
    return new


class Layout:
    """The ops of a loaded schedule as written: op models and :class:`Block` s, in program order.

    A :class:`~schedsim.spec.model.ScheduleSpec` loaded with blocks keeps this instead of its ``ops`` list,
    which :meth:`materialise` builds on first access; the lowering reads the layout directly.
    ``items[k]`` is an op model (its source in ``sources[k]``) or a Block (with its own ``sources``).
    """

    def __init__(self, items: list[Any], sources: list[Any]) -> None:
        self.items, self.sources = items, sources

    def materialise(self) -> tuple[list[Any], list[tuple[int | None, int | None, str]]]:
        """``(ops, sources)`` as the general path gives them."""
        ops: list[Any] = []
        srcs: list[tuple[int | None, int | None, str]] = []
        for it, src in zip(self.items, self.sources, strict=True):
            if isinstance(it, Block):
                ops.extend(it.ops())
                srcs.extend(it.sources[j] for j in it.row_rep.tolist())
            else:
                ops.append(it)
                srcs.append(src)
        return ops, srcs


def _keyable(v: Any) -> Any:
    """A hashable key that tells apart values pydantic may treat differently (1, 1.0, True, -0.0, 0.0)."""
    t = type(v)
    if t is float:
        return (t, repr(v))
    if t is list or t is LList or t is tuple or t is TagSet:
        return (list, tuple(_keyable(x) for x in v))
    hash(v)
    return (t, v)


def _vector_field(key: str, v: Any) -> Any:
    """``f(env, loop, n)`` for field ``key`` written as ``v``: a plain value, a :class:`_Vec`, or (a list) a
    list of those; raises ExprError (does not parse) or _Abandon (a nested list or mapping)."""
    from schedsim.expr import NotVectorisable, _parse, compile_interpolate_vector, compile_vector

    def scalar(x: Any) -> Any:
        if not isinstance(x, str):
            return lambda env, loop, n: x
        if key in NUMERIC_FIELDS:
            return compile_vector(x.strip().removeprefix("{").removesuffix("}") if x.strip().startswith("{") else x)
        return compile_interpolate_vector(x)

    if key == "ranks":  # the same for every iteration unless it names a loop variable (then per iteration)
        f = _compile_ranks(v)
        texts = [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, list) else []
        used = {nd.id for t in texts for nd in ast.walk(_parse(t.strip("{}").strip())) if isinstance(nd, ast.Name)}

        def ranks(env: Mapping[str, Any], loop: Mapping[str, Any], n: int) -> Any:
            if used & loop.keys():
                raise NotVectorisable("ranks from a loop variable")
            return f(env, None)

        return ranks
    if isinstance(v, dict):
        if key != "tags" or any(isinstance(x, (list, dict)) for x in v.values()):
            raise _Abandon
        key = "tag"
        subs = [(k2, scalar(x)) for k2, x in v.items()]
        return lambda env, loop, n: {k2: f(env, loop, n) for k2, f in subs}
    if isinstance(v, list):
        if any(isinstance(x, (list, dict)) for x in v):
            raise _Abandon
        fns = [scalar(x) for x in v]
        return lambda env, loop, n: [f(env, loop, n) for f in fns]
    return scalar(v)


def _values(vf: Any, f: Any, env: Mapping[str, Any], loop: dict[str, Any], n: int,
            envs: Any) -> Any:
    """The field's value for each of the ``n`` iterations: a plain value (the same in all), an object array,
    or a list of those (a list field). Vectorised by ``vf``; where that cannot be, ``f`` (the compiled scalar
    form) runs per iteration; an ExprError there abandons the block."""
    from schedsim.expr import _Vec

    try:
        v = vf(env, loop, n)
        if isinstance(v, list):
            return [x.a if isinstance(x, _Vec) else x for x in v]
        if isinstance(v, dict):
            return {k: x.a if isinstance(x, _Vec) else x for k, x in v.items()}
        return v.a if isinstance(v, _Vec) else v
    except ExprError:
        raise _Abandon from None
    except Exception:  # NotVectorisable, or an error some iteration raises: evaluate one by one
        pass
    try:
        vals = [f(e) for e in envs()]
    except ExprError:
        raise _Abandon from None
    if vals and isinstance(vals[0], dict):  # tags: one value per key
        return {k: _objects([d[k] for d in vals]) for k in vals[0]}
    return _objects([tuple(x) if isinstance(x, list) else x for x in vals])


def _objects(vals: list[Any]) -> Any:
    """A 1-d object array of ``vals`` (tuples stay one element each; numpy would make a 2-d array)."""
    import numpy as np
    out = np.empty(len(vals), object)
    for i, x in enumerate(vals):
        out[i] = x
    return out


def _block(body: list[tuple[Any, ...]], names: list[str], values: list[list[Any]], env: dict[str, Any],
           ctx: _Ctx) -> Block | None:
    """The rows of a plain foreach body (:func:`_plain_body`) over the whole iteration space, or None when
    the general path must expand it (an expression fails or cannot be evaluated in bulk, a loop value that is
    not a scalar, a name that is not a valid string, a limit of :class:`_Ctx` would be passed).

    Names, ``deps`` and every other field are evaluated over the iteration space at once
    (:func:`schedsim.expr.compile_vector`: numpy object arrays, Python's operators per element);
    representatives are built by the general path's own code and must agree with the bulk values.
    """
    import numpy as np

    from schedsim.expr import _Vec

    sizes = [len(v) for v in values]
    n = math.prod(sizes)
    if ctx.visits + n > ctx.max_ops:
        return None
    if n == 0:
        return _empty_block()
    loop: dict[str, Any] = {}
    stride = n
    for nm, vals, size in zip(names, values, sizes, strict=True):
        types = set(map(type, vals))
        if not types <= {int, float, str, bool}:
            return None
        stride //= size
        base = np.empty(size, object)
        base[:] = vals
        idx = np.tile(np.repeat(np.arange(size), stride), n // (size * stride))
        loop[nm] = _Vec(base[idx], str not in types)
    try:
        return _block_rows(body, names, loop, n, env, ctx)
    except _Abandon:
        return None


_NAME_RE = re.compile(f"(?:{NAME_PATTERN.removeprefix('^').removesuffix('$')}\n)*")  # one name per line


@dataclass
class _Entry:
    """One body entry over the iterations its ``when`` keeps (see :func:`_entry_rows`)."""

    e: int  # position in the body
    keep: Any  # int64[nk]: the iterations kept
    names: Any  # object[nk]: name of each row
    deps: list[Any]  # per dependency: a name, or object[nk] of names
    combo: Any  # int64[nk]: combination of the other fields' values
    firsts: Any  # int64: first row of each combination
    has_deps: bool
    vals: dict[str, Any]  # field -> plain value, object[nk], or a list of those (a list field)
    tags: list[tuple[tuple[str, Any], ...]]
    chars: int
    strs: dict[str, Any]  # field of _ROW_STRS -> object[nk]
    rank: Any  # object[nk]: each row's rank (an entry instanced per rank), else None


def _block_rows(body: list[tuple[Any, ...]], names: list[str], loop: dict[str, Any], n: int,
                env: dict[str, Any], ctx: _Ctx) -> Block:
    """:func:`_block` once the loop values are arrays; raises _Abandon where the general path must expand."""
    import numpy as np

    done: dict[tuple[bool, str], Any] = {}
    entries = [x for e, b in enumerate(body)
               if (x := _entry_rows(e, b, loop, n, env, done, ctx.plan(b[5]).vec)) is not None]
    if not entries:
        ctx.visits += n
        return _empty_block()
    E, R = len(body), sum(len(x.keep) for x in entries)
    chars = sum(x.chars for x in entries)
    if ctx.entries + R > ctx.max_ops or ctx.chars + chars > ctx.max_chars:
        raise _Abandon  # the general path raises the limit's error at the op that passes it
    # rows in the general path's order: by iteration, then entry
    order = np.argsort(np.concatenate([x.keep * E + x.e for x in entries]), kind="stable")
    inv = np.empty_like(order)
    inv[order] = np.arange(R)
    reps, rep_deps, rep_tags, gid = _representatives(entries, body, loop, env, E)
    row_rep = np.concatenate([gid[j][x.combo] for j, x in enumerate(entries)])[order]
    row_names = np.concatenate([x.names for x in entries])[order]
    row_tags = np.fromiter(itertools.chain.from_iterable(x.tags for x in entries), object, R)[order]  # type: ignore[type-var]
    row_strs = {k: np.concatenate([x.strs[k] for x in entries])[order] for k in _ROW_STRS}
    dep_cnt = np.repeat(np.array([len(x.deps) for x in entries], np.int64), [len(x.keep) for x in entries])[order]
    dptr = np.cumsum(dep_cnt) - dep_cnt
    flat = np.empty(int(dep_cnt.sum()), object)
    off = 0
    for x in entries:
        start = dptr[inv[off:off + len(x.keep)]]
        for k, d in enumerate(x.deps):
            flat[start + k] = d
        off += len(x.keep)
    ctx.visits += n
    ctx.entries += R
    ctx.chars += chars
    return Block(reps, rep_deps, rep_tags, row_rep, row_names, dep_cnt, flat, row_tags, row_strs)


def _empty_block() -> Block:
    import numpy as np
    return Block([], [], [], np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0, np.int64),
                 np.zeros(0, object), np.zeros(0, object), {k: np.zeros(0, object) for k in _ROW_STRS})


def _entry_rows(e: int, b: tuple[Any, ...], loop: dict[str, Any], n: int, env: dict[str, Any],
                done: dict[tuple[bool, str], Any], vec: dict[str, Any]) -> _Entry | None:
    """Entry ``e`` of the body over the iterations its ``when`` keeps (None: none kept): its fields' values,
    names, ``deps``, tags and combinations of the other fields (one representative each).

    An entry instanced per rank (``b[6]``, see :func:`_plain_body`) runs over iterations x its ranks (rank
    fastest, the general path's order), ``rank`` bound as one more loop variable and ``ranks`` = ``[rank]``.

    ``vec`` caches the entry's vectorised fields (:attr:`_Plan.vec`): an inner ``foreach`` is one block per
    outer iteration, and compiling its fields each time cost more than expanding a small inner loop."""
    import numpy as np

    from schedsim.expr import _Vec, compile_vector

    when, fields, _key_marks, _mark, _p, item, ranks_of = b
    it = None  # per candidate row, its iteration (entries instanced per rank)
    base_loop, base_n, base_done = loop, n, done  # per iteration: a field without `rank` is evaluated there
    if ranks_of is not None:
        rl = _entry_ranks(ranks_of, item, env, loop)
        if not rl:
            return None
        it = np.repeat(np.arange(n), len(rl))
        rank_col = np.empty(len(it), object)
        rank_col[:] = rl * n
        loop = {**{k: _Vec(v.a[it], v.num) for k, v in loop.items()}, "rank": _Vec(rank_col, True)}
        n = len(it)
        done = {}  # the other entries' values are per iteration, not per (iteration, rank)

    def envs_of(keep: Any) -> Any:
        return _envs(env, loop, keep)

    keep = np.arange(n)
    if when is not None:
        def when_vec(env_: Any, loop_: Any, n_: int) -> Any:
            if "\0when" not in vec:
                vec["\0when"] = compile_vector(str(item["when"]))
            return vec["\0when"](env_, loop_, n_)

        w = _values(when_vec, when, env, loop, n, envs_of(keep))
        keep = np.flatnonzero(np.asarray(np.frompyfunc(bool, 1, 1)(w), dtype=bool) if isinstance(w, np.ndarray)
                              else np.full(n, bool(w)))
    nk = len(keep)
    if not nk:
        return None
    sub = {k: _Vec(v.a[keep], v.num) for k, v in loop.items()}
    vals: dict[str, Any] = {}
    for k, f, fm in fields:
        if ranks_of is not None and k == "ranks":
            vals[k] = [sub["rank"].a]
            continue
        raw = item[k]
        if it is not None and not _uses_rank(raw, k):  # the same on every rank: once per iteration, then spread
            vals[k] = _spread(_field_values(k, f, fm, raw, vec, env, base_loop, base_n, base_n, np.arange(base_n),
                                            lambda keep_: _envs(env, base_loop, keep_), base_done), it[keep])
            continue
        vals[k] = _field_values(k, f, fm, raw, vec, env, sub, nk, n, keep, envs_of, done)
    names = _row_names(vals.get("name"), nk)
    tags = _tag_rows(vals.pop("tags", {}), nk)
    deps = vals.get("deps", [])
    if not isinstance(deps, list) or not all(
            type(d) is str or (isinstance(d, np.ndarray) and set(map(type, d.tolist())) == {str}) for d in deps):
        raise _Abandon
    strs = {k: _row_strs(k, vals.get(k), nk) for k in _ROW_STRS}
    combo, firsts = _combos(vals, nk)
    return _Entry(e=e, keep=keep if it is None else it[keep], names=names, deps=deps, combo=combo, firsts=firsts,
                  has_deps="deps" in vals, vals=vals, tags=tags, chars=_chars(vals, nk), strs=strs,
                  rank=None if it is None else sub["rank"].a)


def _envs(env: dict[str, Any], loop: dict[str, Any], keep: Any) -> Any:
    """``envs()``: the environment of each iteration ``keep`` (loop values over ``env``), one by one."""
    names = list(loop)
    cols = [loop[nm].a[keep].tolist() for nm in names]
    return lambda: ({**env, **dict(zip(names, vals, strict=True))} for vals in zip(*cols, strict=True))


def _field_values(k: str, f: Any, fm: Mark | None, raw: Any, vec: dict[str, Any], env: dict[str, Any],
                  sub: dict[str, Any], nk: int, n: int, keep: Any, envs_of: Any, done: dict[Any, Any]) -> Any:
    """Field ``k`` (written ``raw``, compiled ``f``) over the ``nk`` iterations ``keep`` of ``n`` (loop values
    ``sub``): :func:`_values` of its vectorised form (cached in ``vec``); a string evaluated over every iteration
    is evaluated alike in any field but a numeric one (`deps: ["mm{i}"]` and another entry's `name: mm{i}`),
    so it is computed once (``done``)."""
    one = raw[0] if type(raw) is LList and len(raw) == 1 else raw
    ck = (k in NUMERIC_FIELDS, one) if nk == n and type(one) is str else None
    if ck is not None and ck in done:
        return [done[ck]] if one is not raw else done[ck]
    vf = vec.get(k)
    if vf is None:
        try:
            vf = vec[k] = _vector_field(k, raw)
        except ExprError:
            raise _Abandon from None
    got = _values(vf, (lambda env_: f(env_, fm)), env, sub, nk, envs_of(keep))
    if ck is not None:
        done[ck] = got[0] if one is not raw else got
    return got


def _spread(v: Any, idx: Any) -> Any:
    """Values per iteration (:func:`_values`' forms) taken at iterations ``idx``: one per row."""
    import numpy as np
    if isinstance(v, np.ndarray):
        return v[idx]
    if isinstance(v, list):
        return [_spread(x, idx) for x in v]
    if isinstance(v, dict):
        return {k: _spread(x, idx) for k, x in v.items()}
    return v


def _entry_ranks(ranks_of: Any, item: Mapping[str, Any], env: dict[str, Any], loop: dict[str, Any]) -> list[int]:
    """The ranks an entry instanced per rank runs on, in the order written (its ``ranks``, else 0..world_size-1,
    as :func:`_expand_ops`); _Abandon where that depends on the iteration or is not a list of distinct ints
    (the general path then evaluates, or refuses, it per iteration)."""
    from schedsim.expr import _parse

    v = item.get("ranks")
    texts = [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, list) else []
    try:
        used = {nd.id for t in texts for nd in ast.walk(_parse(t.strip("{}").strip())) if isinstance(nd, ast.Name)}
        rl = ranks_of(env, None)
    except ExprError:
        raise _Abandon from None
    if used & loop.keys():
        raise _Abandon
    if rl is None:
        w = env.get("world_size")
        if type(w) is not int:
            raise _Abandon
        rl = list(range(w))
    if not isinstance(rl, list) or any(type(r) is not int for r in rl) or len(set(rl)) != len(rl):
        raise _Abandon
    return rl


#: Fields a row carries on its own, like its name, not in its representative's combination: a send's or recv's
#: ``p2p_batch`` (``nccl_group``, its alias) and message ``tag``, different in every iteration of a batched
#: loop. Each is a string (``p2p_batch`` a valid name) or absent (None).
_ROW_STRS = ("p2p_batch", "nccl_group", "tag")


def _row_strs(key: str, v: Any, nk: int) -> Any:
    """The rows' ``key`` (:data:`_ROW_STRS`) as an object array (None where not written), checked as pydantic
    checks it where it varies (else _Abandon; a constant value is the representative's, validated there)."""
    import numpy as np
    out = np.empty(nk, object)
    if not isinstance(v, np.ndarray):
        out.fill(v)
        return out
    lst = v.tolist()
    if set(map(type, lst)) != {str}:
        raise _Abandon
    if key != "tag":
        joined = "\n".join(lst) + "\n"
        if joined.count("\n") != nk or _NAME_RE.fullmatch(joined) is None:
            raise _Abandon
    out[:] = lst
    return out


def _row_names(nm: Any, nk: int) -> Any:
    """The rows' names as an object array, checked as pydantic checks ``name`` (else _Abandon)."""
    import numpy as np
    if not isinstance(nm, np.ndarray):
        if not isinstance(nm, str):
            raise _Abandon  # pydantic's error, worded by the general path
        one = nm
        nm = np.empty(nk, object)
        nm.fill(one)  # one name for many rows: on one rank each, or a duplicate _load_blocks finds
    lst = nm.tolist()
    if set(map(type, lst)) != {str}:
        raise _Abandon  # pydantic's error, worded by the general path
    joined = "\n".join(lst) + "\n"
    if joined.count("\n") != nk or _NAME_RE.fullmatch(joined) is None:
        raise _Abandon
    return nm


def _tag_rows(tags: Any, nk: int) -> list[tuple[tuple[str, Any], ...]]:
    """Per row, ``tuple(sorted(tags.items()))`` (the lowering's tag set), from the tags' per-key values."""
    import numpy as np
    if not isinstance(tags, dict):
        raise _Abandon
    tcols = [zip(itertools.repeat(k, nk), v.tolist() if isinstance(v, np.ndarray) else itertools.repeat(v, nk),
                 strict=False) for k, v in sorted(tags.items())]
    rows = list(zip(*tcols, strict=True)) if tcols else [()] * nk
    try:
        hash(tuple(rows))
    except TypeError:
        raise _Abandon from None
    if any(v.dtype.kind in "fbO" if isinstance(v, np.ndarray) else type(v) in (bool, float) for v in tags.values()):
        rows = list(map(TagSet, rows))  # a boolean or float among the values: kept apart from 1 and 0
    return rows


def _chars(vals: dict[str, Any], nk: int) -> int:
    """Characters of the rows' string fields, as :meth:`_Ctx.count` counts them."""
    import numpy as np
    chars = 0
    for v in vals.values():
        if isinstance(v, str):
            chars += len(v) * nk
        elif isinstance(v, np.ndarray):
            lst = v.tolist()
            chars += sum(map(len, lst)) if set(map(type, lst)) == {str} else sum(len(x) for x in lst if type(x) is str)
    return chars


def _combos(vals: dict[str, Any], nk: int) -> tuple[Any, Any]:
    """``(combo, firsts)``: per row, the id of its values of the fields other than name, deps and
    :data:`_ROW_STRS` (first-seen order), and the first row of each id."""
    import numpy as np
    vary = [v for k, v in vals.items() if k not in ("name", "deps", *_ROW_STRS)
            and (isinstance(v, np.ndarray) or (isinstance(v, list) and any(isinstance(x, np.ndarray) for x in v)))]
    if not vary:
        return np.zeros(nk, np.int64), np.zeros(1, np.int64)
    flat = [c for v in vary for c in ([v] if isinstance(v, np.ndarray) else v) if isinstance(c, np.ndarray)]
    codes = [_int_codes(c) for c in flat]
    if all(c is not None for c in codes):  # every varying value an int (a rank, a size): in bulk
        key, span = np.zeros(nk, np.int64), 1
        for c in codes:
            assert c is not None
            r = int(c.max()) + 1
            if span * r >= 1 << 62:  # renumber the key so far densely (values < nk) before it overflows
                key = np.unique(key, return_inverse=True)[1].reshape(-1)
                span = int(key.max()) + 1
            key, span = key * r + c, span * r  # distinct values stay distinct
        _u, first, inv = np.unique(key, return_index=True, return_inverse=True)
        rank_of = np.empty(len(first), np.int64)
        rank_of[np.argsort(first, kind="stable")] = np.arange(len(first))
        return rank_of[inv.reshape(-1)], np.sort(first)
    cols = [v.tolist() if isinstance(v, np.ndarray) else
            list(zip(*[x.tolist() if isinstance(x, np.ndarray) else [x] * nk for x in v], strict=True))
            for v in vary]
    try:
        keys = [tuple(map(_keyable, k)) for k in zip(*cols, strict=True)]
    except TypeError:
        raise _Abandon from None
    ids: dict[Any, int] = {}
    combo = np.fromiter((ids.setdefault(k, len(ids)) for k in keys), np.int64, nk)
    return combo, np.unique(combo, return_index=True)[1]


def _int_codes(col: Any) -> Any:
    """``col`` (object[n]) as int64 codes in 0 .. 4n + 63 (equal values, equal codes) where every value is an
    ``int`` (not a bool: :func:`_keyable` tells ``1`` from ``True``) of at most 63 bits; else None."""
    import numpy as np
    lst = col.tolist()
    if set(map(type, lst)) != {int}:
        return None
    try:
        arr = np.array(lst, np.int64)
    except OverflowError:
        return None
    lo, hi = int(arr.min()), int(arr.max())
    if hi - lo < 4 * len(arr) + 64:  # a small range: the values less their minimum are the codes
        return arr - lo
    return np.unique(arr, return_inverse=True)[1].reshape(-1)


def _representatives(entries: list[_Entry], body: list[tuple[Any, ...]], loop: dict[str, Any],
                     env: dict[str, Any], E: int) -> tuple[list[LDict], list[bool], list[list[str] | None], list[Any]]:
    """The representative op entries in order of their first row, built by :func:`_plain_op` (the general
    path's code) and compared with the bulk values; and per entry, its combinations' representative ids."""
    import numpy as np
    rep_of = sorted(((int(x.keep[pos]) * E + x.e, j, c, pos) for j, x in enumerate(entries)
                     for c, pos in enumerate(x.firsts.tolist())))
    gid = [np.zeros(len(x.firsts), np.int64) for x in entries]
    reps: list[LDict] = []
    rep_deps: list[bool] = []
    rep_tags: list[list[str] | None] = []
    for i, (_key, j, c, pos) in enumerate(rep_of):
        x = entries[j]
        gid[j][c] = i
        _when, fields, key_marks, mark, p, _item, _ranks = body[x.e]
        t = int(x.keep[pos])
        it_env = {**env, **{k: v.a[t] for k, v in loop.items()}}
        if x.rank is not None:
            it_env["rank"] = x.rank[pos]
        try:
            op = _plain_op(fields, key_marks, mark, it_env)
        except ExprError:
            raise _Abandon from None
        for k, v in x.vals.items():  # the bulk values must be what the general path computes
            want = op[k]
            got = ([y[pos] if isinstance(y, np.ndarray) else y for y in v] if isinstance(v, list)
                   else v[pos] if isinstance(v, np.ndarray) else v)
            if _keyable(list(want) if isinstance(want, list) else want) != _keyable(got):
                raise _Abandon
        if _keyable(tuple(sorted(op.get("tags", {}).items()))) != _keyable(x.tags[pos]):
            raise _Abandon
        op["__path__"] = p
        reps.append(op)
        rep_deps.append(x.has_deps)
        rep_tags.append(list(op["tags"]) if "tags" in op else None)
    return reps, rep_deps, rep_tags, gid


_RANK = re.compile(r"\brank\b")


def _uses_rank(v: Any, key: str = "") -> bool:
    """Whether a field value refers to the `rank` variable in an expression.

    A numeric field (``NUMERIC_FIELDS``: peer, bytes, m/n/k, ...) is an expression even without braces
    (``peer: (rank + 1) % 4``); any other string only inside ``{...}`` or as the bare word ``rank``.
    """
    if isinstance(v, str):
        if key in NUMERIC_FIELDS:
            return _RANK.search(v) is not None
        return "{" in v and _RANK.search(v) is not None or (_RANK.fullmatch(v.strip()) is not None)
    if isinstance(v, dict):
        return any(_uses_rank(x, k if key != "tags" else "tag") for k, x in v.items())
    if isinstance(v, list):
        return any(_uses_rank(x, key) for x in v)
    return False


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
    later = _eval_value("pipeline", rest, sub, ctx, mark, "pipeline")
    done = LDict({k: out[k] if k in out else later[k] for k in block})  # the keys in their written order
    done.mark, done.key_marks = out.mark, {**out.key_marks, **later.key_marks}
    return done


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
        msg = f"unknown key {last!r}"
        fix = f"did you mean {s!r}?" if s else "valid keys: " + ", ".join(valid)
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


def _strip(doc: Any) -> Any:
    """Plain dicts and lists, without the loader's ``__path__`` / ``__env__`` keys (scalars are not recursed into)."""
    if isinstance(doc, dict):
        return {k: _strip(v) if isinstance(v, (dict, list)) else v for k, v in doc.items()
                if k != "__path__" and k != "__env__"}
    if isinstance(doc, list):
        return [_strip(v) if isinstance(v, (dict, list)) else v for v in doc]
    return doc


def load_text(text: str, file: str = "<string>", overrides: Mapping[str, Any] | None = None) -> ScheduleSpec:
    """Load a schedule from YAML text. See :func:`load_schedule`."""
    data = parse_yaml(text, file)
    rows = _ops_file(data, file)
    doc = expand(data, file, overrides, blocks=True)
    if rows:
        from schedsim.spec.limits import _refuse, limit

        n = len(doc.get("ops") or ()) + len(rows)
        if n > limit("SCHEDSIM_MAX_OPS"):  # the expansion counted the written ops only
            raise _refuse(file, "the ops and the ops_file's rows are too many op entries", n, "SCHEDSIM_MAX_OPS",
                          "ops_file")
        doc["ops"] = [*(doc.get("ops") or []), *rows]
    if any(isinstance(x, Block) for x in doc.get("ops") or ()):
        spec = _load_blocks(doc, file)
        if spec is not None:
            return spec
        doc = expand(data, file, overrides)  # something is wrong: the general path finds and words it
    try:
        from schedsim.spec.validation import op_sources

        spec = ScheduleSpec.model_validate(_strip(doc), context={"file": file, "sources": op_sources(doc),
                                                                 "env_lines": _env_lines(doc)})
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
        rows = parse_json(read_input(target, "schedule"), target, "schedule")
    except SpecError as e:  # worded on the schedule's ops_file field, with the JSON file's line when known
        at = "".join(f":{n}" for n in (e.line, e.column) if n is not None)
        raise SpecError(f"{printable(rel)}{at}: {e.message}", file=file, path="ops_file",
                        fix=e.fix) from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SpecError(f"ops_file {rel}: not a JSON list of op mappings", file=file, path="ops_file",
                        fix="write a JSON list of op mappings ({\"name\": ..., \"kind\": ...})")
    return rows


def _env_lines(doc: Any) -> dict[str, int]:
    """The line of each key of the document's ``env:`` mapping (for errors that name a setting there)."""
    env = doc.get("env") if isinstance(doc, dict) else None
    return {str(k): m[0] for k, m in getattr(env, "key_marks", {}).items() if m}


def _load_blocks(doc: LDict, file: str) -> ScheduleSpec | None:
    """The spec of an expanded document holding :class:`Block` s, its ``ops`` kept as a :class:`Layout`; None
    when a rule is broken (the caller loads the schedule by the general path, which raises the error).

    Pydantic and the cross-field rules (:func:`~schedsim.spec.validation.check_spec`) check the schedule with
    each block replaced by its representatives; the per-row fields (``name``, ``deps``) were checked in bulk
    by :func:`_block`, and op names must be unique across all rows.
    """
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
    if any(isinstance(item, Block) and any(m.kind in COLLECTIVE_KINDS and m.ranks is not None and len(m.ranks) == 1
                                           and m.group is None for m in models[a:b]) for item, a, b in spans):
        return None  # one entry per rank forms one collective with the same names elsewhere: the general path
    block_names: list[str] = []
    on_one: list[tuple[str, int]] = []  # (name, rank) of the block rows that run on one rank
    other_names: set[str] = set()
    items: list[Any] = []
    srcs: list[Any] = []
    for item, a, b in spans:
        if isinstance(item, Block):
            item.models, item.sources = models[a:b], sources[a:b]
            one = [m.ranks[0] if m.ranks is not None and len(m.ranks) == 1 else -1 for m in item.models]
            if all(r >= 0 for r in one):
                on_one.extend(zip(item.names.tolist(), [one[j] for j in item.row_rep.tolist()], strict=True))
            else:
                block_names.extend(item.names.tolist())
            items.append(item)
            srcs.append(None)
        else:
            other_names.add(models[a].name)
            items.append(models[a])
            srcs.append(sources[a])
    names = set(block_names)
    if len(names) != len(block_names) or not names.isdisjoint(other_names) or \
            len(set(on_one)) != len(on_one) or not {nm for nm, _ in on_one}.isdisjoint(names | other_names):
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
