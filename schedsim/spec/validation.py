"""Rules that span several fields of a schedule (after pydantic's per-field checks).

Each rule raises :class:`~schedsim.errors.SpecError` with the file, line,
field path, the values it got and a fix, in the style of torchtitan's
``config/validation.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from schedsim.errors import SpecError
from schedsim.kinds import KINDS
from schedsim.spec.model import CollectiveOp, RecvOp, ScheduleSpec, SendOp
from schedsim.units import MAX_BYTES

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
        if spec.streams is not None and (op.kind != "synchronize" or op.stream):
            stream = op.stream or KINDS[op.kind].resource  # the default stream is named after the resource
            if stream not in spec.streams:
                import difflib  # here: only a misspelt stream needs it

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
            if op.group is not None:
                _check_p2p_group(op, ranks, n, partial(err, i))
        if isinstance(op, CollectiveOp):
            _check_group(op, ranks, n, partial(err, i))
            if op.send_bytes is not None or op.recv_bytes is not None:
                _check_splits(op, ranks, partial(err, i))
    _check_split_pairs(spec, err)
    _unique_names(spec, n, err)
    _training_rules(spec, doc, file)


def _split_group(op: CollectiveOp, ranks: list[int]) -> tuple[int, ...]:
    return tuple(sorted(op.group if op.group is not None else ranks))


def _check_splits(op: CollectiveOp, ranks: list[int], err: Callable[[str, str, str], SpecError]) -> None:
    """An all_to_all's per-peer sizes: only on all_to_all; a list of the group's length with ``recv_bytes`` of the
    same length, or a square matrix of the group's size without it; no negative size, none above
    :data:`schedsim.units.MAX_BYTES` and no rank moving more than that in all (:meth:`CollectiveOp.size_bytes`)."""
    if op.kind != "all_to_all":
        raise err("send_bytes", f"{op.kind} {op.name!r} has per-peer sizes; only all_to_all takes send_bytes / "
                  "recv_bytes", "give bytes (or shape), or use kind: all_to_all")
    g = _split_group(op, ranks)
    n = len(g)
    rows = op.send_bytes or []
    if rows and isinstance(rows[0], list):
        if op.recv_bytes is not None:
            raise err("recv_bytes", f"all_to_all {op.name!r} gives send_bytes as a matrix, whose columns are what "
                      "each member receives", "remove recv_bytes")
        bad = next((i for i, r in enumerate(rows) if len(r) != n), None)  # type: ignore[arg-type]
        if len(rows) != n or bad is not None:
            what = f"{len(rows)} rows" if len(rows) != n else f"row {bad} has {len(rows[bad])} entries"  # type: ignore
            raise err("send_bytes", f"all_to_all {op.name!r}: send_bytes is a matrix over its group of {n} ranks "
                      f"{list(g)}, so it needs {n} rows of {n} entries; {what}",
                      f"give {n} rows of {n} sizes (row i: what group member i sends to each member)")
        cells = [(f"[{i}][{j}]", x) for i, r in enumerate(rows) for j, x in enumerate(r)]  # type: ignore[arg-type]
        fields = [("send_bytes", cells)]
    else:
        for field, vals in (("send_bytes", rows), ("recv_bytes", op.recv_bytes)):
            if vals is None:
                raise err("recv_bytes", f"all_to_all {op.name!r} gives send_bytes as a list (this rank's) but no "
                          "recv_bytes", f"add recv_bytes: {n} sizes, what this rank receives from each member, "
                          "or write send_bytes as a matrix for every rank")
            if len(vals) != n:
                raise err(field, f"all_to_all {op.name!r}: {field} has {len(vals)} sizes but its group has {n} "
                          f"ranks {list(g)}", f"give {n} sizes, one per group member in rank order")
        fields = [(f, [(f"[{j}]", x) for j, x in enumerate(v or [])]) for f, v in (("send_bytes", rows),
                                                                                   ("recv_bytes", op.recv_bytes))]
    for field, cells in fields:
        neg = next((c for c in cells if c[1] < 0), None)
        if neg is not None:
            raise err(field, f"all_to_all {op.name!r}: {field}{neg[0]} is {neg[1]}, a negative size",
                      "sizes are bytes, 0 or more")
        big = next((c for c in cells if c[1] > MAX_BYTES), None)
        if big is not None:
            raise err(field, f"all_to_all {op.name!r}: {field}{big[0]} is {big[1]}, above the limit of "
                      f"{MAX_BYTES:,} bytes (1 EiB)", "check the size: bytes, not bits or elements")
    if op.size_bytes() > MAX_BYTES:
        raise err("send_bytes", f"all_to_all {op.name!r} moves {op.size_bytes():,} bytes on one rank, above the "
                  f"limit of {MAX_BYTES:,} bytes (1 EiB)", "check the sizes: bytes, not bits or elements")


def _check_split_pairs(spec: ScheduleSpec, err: Any) -> None:
    """The members of each all_to_all with per-peer sizes agree: what rank a sends rank b (its ``send_bytes``) is
    what b receives from a (its ``recv_bytes``, or the matrix's column), as ``all_to_all_single`` needs; no member
    of it without per-peer sizes."""
    every = list(range(spec.world_size))
    got: dict[tuple[str, tuple[int, ...]], dict[int, tuple[int, Any]]] = {}
    for i, op in enumerate(spec.ops):
        if isinstance(op, CollectiveOp) and op.kind == "all_to_all":
            ranks = op.ranks if op.ranks is not None else every
            g = _split_group(op, ranks)
            for r in ranks:
                got.setdefault((op.name, g), {})[r] = (i, op.splits_of(r, g))
    for (name, g), per in got.items():
        has = {r for r, (_i, sp) in per.items() if sp is not None}
        if not has:
            continue
        if len(has) != len(per):
            r = min(set(per) - has)
            raise err(per[r][0], "send_bytes", f"all_to_all {name!r} has per-peer sizes on rank {min(has)} but not "
                      f"on rank {r}", "give send_bytes (and recv_bytes) on every rank of the collective")
        for a in sorted(per):
            for b in sorted(per):
                sa, rb = per[a][1][0][g.index(b)], per[b][1][1][g.index(a)]
                if sa != rb:
                    i = per[b][0]
                    field = "recv_bytes" if getattr(spec.ops[i], "recv_bytes", None) is not None else "send_bytes"
                    raise err(i, field, f"all_to_all {name!r}: rank {a} sends {sa:g} bytes to rank {b}, but rank {b} "
                              f"receives {rb:g} bytes from rank {a}", f"make rank {b}'s {field} entry for rank {a} "
                              f"equal {sa:g} (all_to_all_single's split sizes must match between the two ranks)")


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


def _check_p2p_group(op: SendOp | RecvOp, ranks: list[int], n: int,
                     err: Callable[[str, str, str], SpecError]) -> None:
    """A send/recv's ``group`` (its process group): ranks of the world, each once, holding every rank that issues
    it and its peer (torch ``P2POp`` / ``isend`` take the peer as a rank of ``group``). That the matching op
    names the same group is checked once the pairs are matched
    (:func:`schedsim.lower.p2p_comms.check_p2p_groups`). ``err(field, msg, fix)`` makes the error."""
    g = op.group or []
    bad = [r for r in g if not 0 <= r < n]
    if bad:
        raise err("group", f"{op.kind} {op.name!r} has group rank {bad[0]} but world_size is {n}",
                  f"use ranks in 0..{n - 1}")
    if len(set(g)) != len(g):
        raise err("group", f"{op.kind} {op.name!r} lists a rank twice in its group {g}", "list each rank once")
    missing = [r for r in (*ranks, op.peer) if r not in g]
    if missing:
        who = "its peer" if missing[0] == op.peer else "a rank it runs on"
        raise err("group", f"{op.kind} {op.name!r}: rank {missing[0]} ({who}) is outside its group {g}",
                  f"add {missing[0]} to `group` (both ends of a send/recv are in its process group), or remove "
                  "`group` to let the family's communicator be inferred")


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
