"""Rules that span several fields of a schedule (after pydantic's per-field checks).

Each rule raises :class:`~schedsim.errors.SpecError` with the file, line,
field path, the values it got and a fix, in the style of torchtitan's
``config/validation.py``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from functools import partial
from typing import Any

from schedsim.errors import SpecError
from schedsim.kinds import KINDS
from schedsim.spec.model import CollectiveOp, RecvOp, ScheduleSpec, SendOp

__all__ = ["check_spec", "op_sources"]


def op_sources(doc: Any) -> list[tuple[int | None, int | None, str]]:
    """Per op of the expanded document: ``(line, column, field path)`` for error messages."""
    out: list[tuple[int | None, int | None, str]] = []
    for i, d in enumerate(doc.get("ops") or []):
        mark = getattr(d, "mark", None)
        out.append((mark[0] if mark else None, mark[1] if mark else None, d.get("__path__", f"ops[{i}]")))
    return out


def check_spec(spec: ScheduleSpec, doc: Any, file: str) -> None:
    """Check ranks, peers, roots, streams and name uniqueness.

    Raises
    ------
    SpecError
        On the first rule broken.
    """
    ops_doc = doc.get("ops") or []
    sources = spec._sources
    n = spec.world_size

    def err(i: int, field: str, msg: str, fix: str) -> SpecError:
        d = ops_doc[i] if i < len(ops_doc) else {}
        km = getattr(d, "key_marks", {})
        mark = km.get(field) or getattr(d, "mark", None)
        path = f"{sources[i][2]}.{field}" if i < len(sources) else field
        return SpecError(msg, file=file, line=mark[0] if mark else None, column=mark[1] if mark else None,
                         path=path, fix=fix)

    every = list(range(n))
    for i, op in enumerate(spec.ops):
        ranks = op.ranks if op.ranks is not None else every
        if op.ranks is not None:  # all ranks (the default) are valid and distinct by construction
            bad = [r for r in ranks if not 0 <= r < n]
            if bad:
                raise err(i, "ranks", f"op {op.name!r} uses rank {bad[0]} but world_size is {n}",
                          f"use ranks in 0..{n - 1}, or raise world_size")
            if len(set(ranks)) != len(ranks):
                raise err(i, "ranks", f"op {op.name!r} lists a rank twice: {ranks}", "list each rank once")
        if not ranks:
            raise err(i, "ranks", f"op {op.name!r} runs on no rank", "give at least one rank, or omit `ranks` for all")
        if spec.streams is not None:
            stream = op.stream or KINDS[op.kind].resource  # the default stream is named after the resource
            if stream not in spec.streams:
                s = difflib.get_close_matches(stream, spec.streams, n=1)
                raise err(i, "stream", f"stream {stream!r}{'' if op.stream else ' (the default for ' + op.kind + ')'} "
                          f"is not declared in `streams` {spec.streams}",
                          f"did you mean {s[0]!r}?" if s else f"add {stream!r} to `streams` or set `stream:`")
        if isinstance(op, (SendOp, RecvOp)):
            peer = op.peer
            if not 0 <= peer < n:
                raise err(i, "peer", f"{op.kind} {op.name!r} has peer {peer} but world_size is {n}",
                          f"use a peer in 0..{n - 1}")
            if peer in ranks:
                raise err(i, "peer", f"{op.kind} {op.name!r} on rank {peer} names itself as peer",
                          "a send/recv needs another rank as peer")
        if isinstance(op, CollectiveOp):
            _check_group(op, ranks, n, partial(err, i))
    _unique_names(spec, n, err)
    _training_rules(spec, doc, file)


def _check_group(op: CollectiveOp, ranks: list[int], n: int, err: Callable[[str, str, str], SpecError]) -> None:
    """A collective's ``group`` (within the world, holding the ranks that issue it) and ``root`` (in the group, and
    only on the kinds the registry marks ``rooted``: on the others it would be ignored). ``err(field, msg, fix)``
    makes the error."""
    group = ranks
    if op.group is not None:
        group = op.group
        outside = [r for r in ranks if r not in group]
        bad_g = [r for r in group if not 0 <= r < n]
        if bad_g:
            raise err("group", f"collective {op.name!r} has group rank {bad_g[0]} but world_size is {n}",
                      f"use ranks in 0..{n - 1}")
        if outside:
            raise err("group", f"collective {op.name!r} runs on rank {outside[0]} outside its group {group}",
                      "add the rank to `group`, or remove it from `ranks`")
    if KINDS[op.kind].rooted:
        if op.root not in group:
            raise err("root", f"{op.kind} {op.name!r} has root {op.root} outside its group {group}",
                      f"set root to one of {group}")
    elif "root" in op.model_fields_set:
        rooted = ", ".join(k for k, info in KINDS.items() if info.rooted)
        raise err("root", f"{op.kind} {op.name!r} has no root rank (only {rooted} have one)",
                  f"remove root from the {op.kind}")


def _training_rules(spec: ScheduleSpec, doc: Any, file: str) -> None:
    """Megatron's validation of a ``training:`` block (:func:`schedsim.spec.training_block.check_training`)."""
    if spec.training is not None:
        from schedsim.spec.training_block import check_training

        check_training(spec.training, spec.world_size, doc.get("training"), file, spec.env)


def _unique_names(spec: ScheduleSpec, n: int, err: Any) -> None:
    """No op name is used twice on one rank; only names written more than once are looked at rank by rank."""
    count: dict[str, int] = {}
    for op in spec.ops:
        count[op.name] = count.get(op.name, 0) + 1
    seen: dict[tuple[int, str], int] = {}
    for i, op in enumerate(spec.ops):
        if count[op.name] < 2:
            continue
        for r in (op.ranks if op.ranks is not None else range(n)):
            key = (r, op.name)
            if key in seen:
                j = seen[key]
                raise err(i, "name", f"op name {op.name!r} is used twice on rank {r} (also at {spec.source_of(j)})",
                          "give each op a unique name per rank, e.g. add {i} inside a foreach")
            seen[key] = i
