"""Rule host-wait: a rank's host thread blocked in a synchronisation (``torch.cuda.synchronize()``,
``stream.synchronize()``, ``event.synchronize()``, ``tensor.item()``), as the tags of the op issued right after it.

An op carrying :data:`HOST_WAIT_TAG` is issued after a host synchronisation: the host reaches the synchronising
call :data:`HOST_WAIT_TAG` µs after its previous call returned, blocks there until the op's predecessors have
ended (with :data:`HOST_WAIT_SCOPE_TAG` ``device``: until every op of its rank issued before it has ended, as
``cudaDeviceSynchronize`` does), returns :data:`HOST_WAIT_AFTER_TAG` µs later and only then issues the op and the
ops after it. ``schedsim import`` writes :data:`HOST_WAIT_TAG` for a recorded synchronisation
(:mod:`schedsim.trace.to_schedule`); the schedule language's ``kind: synchronize`` lowers to these three tags on
the rank's next op (:func:`schedsim.lower.written.add_written`). Both GPU models read them: ``replay`` in its
host (:class:`schedsim.sim.replay._ReplayHost`), ``waves`` in its compiled loop (``_cwaves.c``,
``host_resolve``), from the columns of :func:`host_wait_columns`: there the ops after a wait are issued as the
static issue times (rule host-issue) say, shifted by ``max(previous shift, P - A)``, ``P`` the time the awaited
ops ended and ``A`` the static time the host reached the call (:func:`arrivals`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

__all__ = ["HOST_WAIT_TAG", "HOST_WAIT_AFTER_TAG", "HOST_WAIT_SCOPE_TAG", "HOST_WAIT_TAGS", "HostWaits",
           "host_wait_columns", "arrivals", "check_host_wait_tags"]

#: Tag of an op launched right after a host synchronisation: the host time (µs) from the previous issue to the
#: synchronising call. The host then waits for the op's predecessors (or, :data:`HOST_WAIT_SCOPE_TAG`, its rank's
#: earlier ops) before spending :data:`HOST_WAIT_AFTER_TAG` and the op's own ``host_us``.
HOST_WAIT_TAG = "host_wait_before_us"
#: Tag beside :data:`HOST_WAIT_TAG`: the host time (µs) of the synchronising call after the awaited work ended
#: (its return; ``kind: synchronize``'s ``host_us``); 0 where absent.
HOST_WAIT_AFTER_TAG = "host_wait_after_us"
#: Tag beside :data:`HOST_WAIT_TAG`: ``device`` where the host waits for every op its rank issued before this one
#: (``torch.cuda.synchronize()``); absent: for the op's predecessors alone (a stream or events).
HOST_WAIT_SCOPE_TAG = "host_wait_scope"
HOST_WAIT_TAGS = (HOST_WAIT_TAG, HOST_WAIT_AFTER_TAG, HOST_WAIT_SCOPE_TAG)


class HostWaits(NamedTuple):
    """Per op (float64 / int32 of shape (N,)): ``before`` (s; NaN where the op follows no host wait), ``after``
    (s, 0 where none) and ``device`` (1: device scope)."""

    before: np.ndarray
    after: np.ndarray
    device: np.ndarray


def _tag_rows(tagsets: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tag set: before and after (s; NaN before where no :data:`HOST_WAIT_TAG`) and device scope."""
    n = len(tagsets)
    before, after, dev = np.full(n, np.nan), np.zeros(n), np.zeros(n, np.int32)
    for k, tags in enumerate(tagsets):
        d = dict(tags)
        b = d.get(HOST_WAIT_TAG)
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            before[k] = float(b) * 1e-6
            a = d.get(HOST_WAIT_AFTER_TAG, 0.0)
            after[k] = float(a) * 1e-6 if isinstance(a, (int, float)) and not isinstance(a, bool) else 0.0
            dev[k] = d.get(HOST_WAIT_SCOPE_TAG) == "device"
    return before, after, dev


def host_wait_columns(G: Any, mode: str) -> HostWaits | None:
    """The host waits of the Program ``G`` (:class:`~schedsim.lower.program.Program`) as columns, or None where
    it has none or ``mode`` is ``cuda_graph`` (a graph replay has no host between its nodes). The tags hold as
    :func:`check_host_wait_tags` checks them (it runs before)."""
    if mode == "cuda_graph" or not G.N or not G.may_have_tag(HOST_WAIT_TAG):
        return None
    before, after, dev = _tag_rows(G.tagsets)
    if np.isnan(before).all():
        return None
    tid = np.asarray(G.tags_id, np.int64)
    return HostWaits(before[tid], after[tid], dev[tid])


def arrivals(issue: np.ndarray, rank: np.ndarray, before: np.ndarray) -> np.ndarray:
    """When the host reaches each synchronising call in the static issue times (s, shape (N,), NaN where no
    wait): the issue of the rank's previous op (0 for its first) plus ``before``. ``issue``: rule host-issue's
    issue times, ``rank`` ascending (a Program's layout)."""
    prev = np.zeros(len(issue))
    if len(issue) > 1:
        same = rank[1:] == rank[:-1]
        prev[1:] = np.where(same, issue[:-1], 0.0)
    return prev + before


def check_host_wait_tags(G: Any) -> None:
    """Refuse an op of the Program ``G`` whose :data:`HOST_WAIT_AFTER_TAG` is not a finite number of µs at least 0,
    whose :data:`HOST_WAIT_SCOPE_TAG` is not ``device``, or that carries either without :data:`HOST_WAIT_TAG`
    (:data:`HOST_WAIT_TAG` itself: :func:`schedsim.sim.replay.check_recorded_tags`).

    Raises
    ------
    SpecError
        Naming the first such op (``name@rank``), the tag and its value, and ``G.file``.
    """
    from schedsim.errors import SpecError, printable
    from schedsim.graph.ops import format_op_id

    if not G.N or not (G.may_have_tag(HOST_WAIT_AFTER_TAG) or G.may_have_tag(HOST_WAIT_SCOPE_TAG)):
        return
    for k, tags in enumerate(G.tagsets):
        d = dict(tags)
        bad = None
        a = d.get(HOST_WAIT_AFTER_TAG, 0.0)
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a < math.inf:
            bad = (HOST_WAIT_AFTER_TAG, a, "a finite number of µs at least 0")
        elif HOST_WAIT_SCOPE_TAG in d and d[HOST_WAIT_SCOPE_TAG] != "device":
            bad = (HOST_WAIT_SCOPE_TAG, d[HOST_WAIT_SCOPE_TAG], "'device' (or no tag: the op's predecessors)")
        elif (HOST_WAIT_AFTER_TAG in d or HOST_WAIT_SCOPE_TAG in d) and HOST_WAIT_TAG not in d:
            bad = (HOST_WAIT_AFTER_TAG if HOST_WAIT_AFTER_TAG in d else HOST_WAIT_SCOPE_TAG, "given",
                   f"given only beside {HOST_WAIT_TAG}")
        if bad is None:
            continue
        i = int(np.flatnonzero(np.asarray(G.tags_id) == k)[0])
        op = format_op_id(G.names[int(G.name_id[i])], int(G.rank[i]))
        raise SpecError(f"op {printable(op, 80)}: host-wait tag {bad[0]} is {printable(repr(bad[1]), 40)}, not "
                        f"{bad[2]}", file=G.file or None, path=f"tags.{bad[0]}",
                        fix=f"write {bad[0]} as {bad[2]}, or drop the tag")
