"""Rule host-wait: a rank's host thread blocked in a synchronisation (``torch.cuda.synchronize()``,
``stream.synchronize()``, ``event.synchronize()``, ``tensor.item()``), as the tags of the op issued right after it.

An op carrying :data:`HOST_WAIT_TAG` is issued after a host synchronisation: the host reaches the synchronising
call :data:`HOST_WAIT_TAG` µs after its previous call returned, blocks there until the op's predecessors have
ended (with :data:`HOST_WAIT_SCOPE_TAG` ``device``: until every op of its rank issued before it has ended, as
``cudaDeviceSynchronize`` does; ``stream``: until the last op issued before it on the stream
:data:`HOST_WAIT_ON_TAG` names has, as ``cudaStreamSynchronize``; ``ops``: until the ops of its rank that
:data:`HOST_WAIT_ON_TAG` names, space-separated, have, as ``cudaEventSynchronize`` on their events), returns
:data:`HOST_WAIT_AFTER_TAG` µs later and only then issues the op and the ops after it. ``schedsim import`` writes
:data:`HOST_WAIT_TAG` for a recorded synchronisation (:mod:`schedsim.trace.to_schedule`); the schedule language's
``kind: synchronize`` lowers to these tags on the rank's next op (:func:`schedsim.lower.written.add_written`), and
so do a ``training:`` block's ``get_batch_sync`` and ``check_for_nan_in_loss_and_grad``
(:func:`schedsim.lower.training_tail.host_sync_tags`). Both GPU models read them: ``replay`` in its host
(:class:`schedsim.sim.replay._ReplayHost`), ``waves`` in its compiled loop (``_cwaves.c``, ``host_resolve``), from
the columns of :func:`host_wait_columns`: there the ops after a wait are issued as the static issue times (rule
host-issue) say, shifted by ``max(previous shift, P - A)``, ``P`` the time the awaited ops ended and ``A`` the
static time the host reached the call (:func:`arrivals`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

__all__ = ["HOST_WAIT_TAG", "HOST_WAIT_AFTER_TAG", "HOST_WAIT_SCOPE_TAG", "HOST_WAIT_ON_TAG", "HOST_WAIT_TAGS",
           "HOST_WAIT_META", "SCOPES", "HostWaits", "host_wait_columns", "awaited", "arrivals", "host_wait_meta",
           "check_host_wait_tags"]

from schedsim.tags import (  # rule host-wait's tags, defined where the lowering reads them too
    HOST_WAIT_AFTER_TAG,
    HOST_WAIT_ON_TAG,
    HOST_WAIT_SCOPE_TAG,
    HOST_WAIT_TAG,
    HOST_WAIT_TAGS,
    SCOPES,
)


class HostWaits(NamedTuple):
    """Per op (float64 / int32 of shape (N,)): ``before`` (s; NaN where the op follows no host wait), ``after``
    (s, 0 where none), ``scope`` (:data:`SCOPES`' codes; 0: its predecessors) and ``on`` (int32: per op, the
    host wait of scope 2 that waits for it, -1 none; an op several such waits name is the first one's alone: the
    later ones resolve after it anyway, :func:`awaited`)."""

    before: np.ndarray
    after: np.ndarray
    scope: np.ndarray
    on: np.ndarray


def _tag_rows(tagsets: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tag set: before and after (s; NaN before where no :data:`HOST_WAIT_TAG`) and the scope's code."""
    n = len(tagsets)
    before, after, scope = np.full(n, np.nan), np.zeros(n), np.zeros(n, np.int32)
    for k, tags in enumerate(tagsets):
        d = dict(tags)
        b = d.get(HOST_WAIT_TAG)
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            before[k] = float(b) * 1e-6
            a = d.get(HOST_WAIT_AFTER_TAG, 0.0)
            after[k] = float(a) * 1e-6 if isinstance(a, (int, float)) and not isinstance(a, bool) else 0.0
            scope[k] = SCOPES.get(str(d.get(HOST_WAIT_SCOPE_TAG)), 0)
    return before, after, scope


def host_wait_columns(G: Any, mode: str) -> HostWaits | None:
    """The host waits of the Program ``G`` (:class:`~schedsim.lower.program.Program`) as columns, or None where
    it has none or ``mode`` is ``cuda_graph`` (a graph replay has no host between its nodes). The tags hold as
    :func:`check_host_wait_tags` checks them (it runs before)."""
    if mode == "cuda_graph" or not G.N or not G.may_have_tag(HOST_WAIT_TAG):
        return None
    before, after, scope = _tag_rows(G.tagsets)
    if np.isnan(before).all():
        return None
    tid = np.asarray(G.tags_id, np.int64)
    hw = HostWaits(before[tid], after[tid], scope[tid], np.full(G.N, -1, np.int32))
    for g, js in awaited(G, hw.scope).items():
        for j in js:
            if hw.on[j] < 0:
                hw.on[j] = g
    return hw


def awaited(G: Any, scope: np.ndarray) -> dict[int, list[int]]:
    """Per host wait of scope 2 (op index ``g`` of the Program ``G``; ``scope`` as :attr:`HostWaits.scope`), the
    ops it waits for, in program order: the last op before it on its rank on the stream its
    :data:`HOST_WAIT_ON_TAG` names (none where no op came before on it), or the ops of its rank before it that
    the tag names.

    Raises
    ------
    SpecError
        An ``ops`` wait naming an op that its rank does not issue before it.
    """
    from schedsim.errors import SpecError, printable
    from schedsim.graph.ops import format_op_id

    gates = np.flatnonzero(scope == 2)
    if not len(gates):
        return {}
    rank = np.asarray(G.rank)
    starts = np.searchsorted(rank, rank[gates], side="left")
    streams = {s: k for k, s in enumerate(G.streams)}
    names = {s: k for k, s in enumerate(G.names)}
    sid, nid, tid = np.asarray(G.stream_id), np.asarray(G.name_id), np.asarray(G.tags_id)
    out: dict[int, list[int]] = {}
    for g, lo in zip(gates.tolist(), starts.tolist(), strict=True):
        d = dict(G.tagsets[int(tid[g])])
        on = str(d.get(HOST_WAIT_ON_TAG, ""))
        if d.get(HOST_WAIT_SCOPE_TAG) == "stream":
            code = streams.get(on, -1)
            hit = np.flatnonzero(sid[lo:g] == code)
            out[g] = [lo + int(hit[-1])] if len(hit) else []
            continue
        js = []
        for name in on.split():
            hit = np.flatnonzero(nid[lo:g] == names.get(name, -1))
            if not len(hit):
                op = format_op_id(G.names[int(nid[g])], int(rank[g]))
                raise SpecError(f"op {printable(op, 80)}: its host wait waits for op {printable(name, 60)}, which "
                                f"rank {int(rank[g])} does not issue before it", file=G.file or None,
                                path=f"tags.{HOST_WAIT_ON_TAG}",
                                fix="name ops issued earlier on the same rank (an event.synchronize waits for "
                                    "work already issued)")
            js.append(lo + int(hit[-1]))
        out[g] = sorted(set(js))
    return out


def arrivals(issue: np.ndarray, rank: np.ndarray, before: np.ndarray) -> np.ndarray:
    """When the host reaches each synchronising call in the static issue times (s, shape (N,), NaN where no
    wait): the issue of the rank's previous op (0 for its first) plus ``before``. ``issue``: rule host-issue's
    issue times, ``rank`` ascending (a Program's layout)."""
    prev = np.zeros(len(issue))
    if len(issue) > 1:
        same = rank[1:] == rank[:-1]
        prev[1:] = np.where(same, issue[:-1], 0.0)
    return prev + before


#: ``Timeline.meta`` key of the host waits as spans (:func:`host_wait_meta`): the trace draws them on a host row.
HOST_WAIT_META = "host_waits"


def host_wait_meta(meta: dict, ids: Any, rows: np.ndarray, rank: np.ndarray, t_from: np.ndarray,
                   t_to: np.ndarray) -> None:
    """Write ``meta[HOST_WAIT_META]``: per host wait (op rows ``rows`` of the timeline, the op issued after it;
    ``ids``: the op ids, a list or a callable giving it), its rank, when the host reached the synchronising call
    and when it returned (s), as lists under ``op``, ``rank``, ``from_s``, ``to_s``; nothing where there are
    none."""
    if not len(rows):
        return
    names = ids() if callable(ids) else ids
    meta[HOST_WAIT_META] = {"op": [str(names[i]) for i in rows.tolist()], "rank": rank[rows].tolist(),
                            "from_s": np.round(t_from, 12).tolist(), "to_s": np.round(t_to, 12).tolist()}


def check_host_wait_tags(G: Any) -> None:
    """Refuse an op of the Program ``G`` whose :data:`HOST_WAIT_AFTER_TAG` is not a finite number of µs at least 0,
    whose :data:`HOST_WAIT_SCOPE_TAG` is not one of :data:`SCOPES`, whose scope ``stream`` or ``ops`` comes without
    a :data:`HOST_WAIT_ON_TAG` string, or that carries any of them without :data:`HOST_WAIT_TAG`
    (:data:`HOST_WAIT_TAG` itself: :func:`schedsim.sim.replay.check_recorded_tags`).

    Raises
    ------
    SpecError
        Naming the first such op (``name@rank``), the tag and its value, and ``G.file``.
    """
    from schedsim.errors import SpecError, printable
    from schedsim.graph.ops import format_op_id

    if not G.N or not any(G.may_have_tag(t) for t in HOST_WAIT_TAGS[1:]):
        return
    for k, tags in enumerate(G.tagsets):
        d = dict(tags)
        bad = None
        a = d.get(HOST_WAIT_AFTER_TAG, 0.0)
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a < math.inf:
            bad = (HOST_WAIT_AFTER_TAG, a, "a finite number of µs at least 0")
        elif HOST_WAIT_SCOPE_TAG in d and d[HOST_WAIT_SCOPE_TAG] not in SCOPES:
            bad = (HOST_WAIT_SCOPE_TAG, d[HOST_WAIT_SCOPE_TAG], "one of " + ", ".join(SCOPES)
                   + " (or no tag: the op's predecessors)")
        elif SCOPES.get(str(d.get(HOST_WAIT_SCOPE_TAG)), 0) == 2 and not isinstance(d.get(HOST_WAIT_ON_TAG), str):
            bad = (HOST_WAIT_ON_TAG, d.get(HOST_WAIT_ON_TAG), "a stream's name (scope stream) or op names (scope ops)")
        else:
            extra = [t for t in HOST_WAIT_TAGS[1:] if t in d]
            if extra and HOST_WAIT_TAG not in d:
                bad = (extra[0], "given", f"given only beside {HOST_WAIT_TAG}")
        if bad is None:
            continue
        i = int(np.flatnonzero(np.asarray(G.tags_id) == k)[0])
        op = format_op_id(G.names[int(G.name_id[i])], int(G.rank[i]))
        raise SpecError(f"op {printable(op, 80)}: host-wait tag {bad[0]} is {printable(repr(bad[1]), 40)}, not "
                        f"{bad[2]}", file=G.file or None, path=f"tags.{bad[0]}",
                        fix=f"write {bad[0]} as {bad[2]}, or drop the tag")


def wait_shift(rank: np.ndarray, before: np.ndarray, hshift: np.ndarray) -> np.ndarray:
    """Each op's host-issue shift (s, shape (N,)) after the loop of rule host-wait: that of the last host wait at or
    before it on its rank (``hshift`` at the waits, as ``_cwaves`` wrote it), 0 before the rank's first wait.
    ``rank`` ascending (a Program's layout); ``before``: :attr:`HostWaits.before` (NaN: no wait)."""
    n = len(rank)
    idx = np.arange(n)
    at = np.where(np.isnan(before), -1, idx)
    first = np.zeros(n, np.int64)
    if n > 1:
        new = np.flatnonzero(rank[1:] != rank[:-1]) + 1
        first[new] = new
    first = np.maximum.accumulate(first)  # each op's rank's first op
    gate = np.maximum.accumulate(at)
    return np.where(gate >= first, hshift[np.maximum(gate, 0)], 0.0)
