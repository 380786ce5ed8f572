"""Step 1 of loading a schedule: YAML parsed keeping the line and column of every node.

:func:`parse_yaml` builds :class:`LDict` / :class:`LList` trees whose nodes carry their :class:`Mark`, and refuses
what PyYAML would take too long or too much memory to build: a document whose aliases expand it past
:data:`MAX_NODES` (plus :data:`ALIAS_NODES` per alias written), found from the composed node graph before
construction. ``_strip`` turns a tree back into plain dicts and lists.
"""

from __future__ import annotations

from typing import Any

import yaml

from schedsim.errors import SpecError
from schedsim.spec.limits import MAX_YAML_DEPTH

__all__ = ["Mark", "LDict", "LList", "MAX_NODES", "ALIAS_NODES", "parse_yaml"]

Mark = tuple[int, int]


class LDict(dict):
    """A dict that remembers where it and each key came from (1-based line, column)."""

    mark: Mark | None = None
    key_marks: dict[str, Mark | None]  # None where a key's position is unknown

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
    alias written, beyond the distinct nodes of its text (``text``: what was composed into ``root``), from the composed
    node graph (shared by its aliases)
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
    except _Yaml11Number as e:
        what, value, fix = e.args
        raise SpecError(f"{node.value} is {what} to YAML 1.1, which schedsim reads: {value!r}", file=file,
                        line=_mark(node)[0], column=_mark(node)[1], fix=fix) from None
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


_NUMBER_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("int", "float"))


class _Yaml11Number(ValueError):
    """A plain scalar YAML 1.1 reads as an octal or base-60 number other than it looks (``010`` is 8, ``1:30``
    is 90); ``args``: (what it is, the value read, a fix)."""


def _yaml11_surprise(text: str, value: Any) -> tuple[str, str] | None:
    """(what, fix) where ``value``, PyYAML's YAML 1.1 reading of the int or float ``text``, is not the number
    the text looks like (YAML 1.2 and Python read ``010`` as 10 or a syntax error, ``1:30`` as a string): an
    octal (``[-+]?0[0-7_]+``) whose decimal reading differs, or a sexagesimal number (``:``-separated base-60
    digits); None otherwise (``00``, ``0_1`` and every other number read as written)."""
    t = text.lstrip("+-")
    if ":" in t:
        return "a base-60 (sexagesimal) number", f"write {value!r} if that is meant, or quote the text as a string"
    if len(t) > 1 and t[0] == "0" and all(c in "01234567_" for c in t) and int(t.replace("_", "")) != abs(value):
        return "an octal number", f"write {value!r} if that is meant, else {text[:len(text) - len(t)]}" \
            f"{int(t.replace('_', ''))} without the leading zero"
    return None


def _scalar(node: yaml.ScalarNode) -> Any:
    """The value of a scalar node, as ``yaml.safe_load`` makes it; a string (the tag the resolver gave most
    scalars of a schedule) is the node's text itself, as ``SafeConstructor.construct_yaml_str`` returns it,
    without a pass through the constructor (half the time of constructing a literal schedule's scalars).

    Raises
    ------
    _Yaml11Number
        A plain number YAML 1.1 reads as octal or base 60 (``bytes: 010`` was 8 bytes, ``duration_us: 1:30``
        90 µs, silently; :func:`_yaml11_number`).
    """
    if node.tag == _STR_TAG:
        return node.value
    value = _SCALAR_LOADER.construct_object(node, deep=True)
    _SCALAR_LOADER.constructed_objects.clear()
    if node.tag in _NUMBER_TAGS and not node.style and (got := _yaml11_surprise(node.value, value)) is not None:
        raise _Yaml11Number(got[0], value, got[1])
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


def _strip(doc: Any) -> Any:
    """Plain dicts and lists, without the loader's ``__path__`` / ``__env__`` keys (scalars are not recursed into)."""
    if isinstance(doc, dict):
        return {k: _strip(v) if isinstance(v, (dict, list)) else v for k, v in doc.items()
                if k != "__path__" and k != "__env__"}
    if isinstance(doc, list):
        return [_strip(v) if isinstance(v, (dict, list)) else v for v in doc]
    return doc
