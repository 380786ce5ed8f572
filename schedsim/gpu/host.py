"""Rule host-issue of the ``waves`` GPU model (:mod:`schedsim.gpu.rules`): the host thread's issue times.

Each op's host class (:func:`host_class`), the issue times as columns (:func:`host_issue_columns`; its Op-list form
is a test oracle, ``tests/oracle/waves_loop.py``), when a kernel reaches the GPU during its call
(:func:`kernel_release`), the end-event bound of an op timed op by op (:func:`end_event_bound`), and the
host's end per rank and its cold first calls after waiting (:func:`host_end_per_rank`, :func:`host_waited`).
"""

from __future__ import annotations

import numpy as np

from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS
from schedsim.lower.program import required as _required

__all__ = ["H_KERNEL", "H_ELEMENTWISE", "H_MEMCPY", "H_P2P", "H_BATCH_P2P", "H_COLL", "H_GRAPH", "HOST_CALL_META_MAX",
           "host_class", "host_issue_columns", "kernel_release", "end_event_bound",
           "host_end_per_rank", "host_waited", "cold_wait_s", "collective_after_call_extra"]

#: Host-call classes of rule host-issue (:func:`host_class`): what one op's call costs on the host.
H_KERNEL, H_ELEMENTWISE, H_MEMCPY, H_P2P, H_BATCH_P2P, H_COLL = range(6)
#: The host-call class of a graph launch (an op's ``graph:``, :func:`host_issue_columns`): one
#: ``launch.graph_launch_us`` for the graph's consecutive ops, as a whole-schedule CUDA graph's replay costs.
H_GRAPH = 6


def host_class(op: Op) -> int:
    """Rule host-issue's call class of ``op``: a kernel launch, a bytes-only ``compute`` (an elementwise add), a copy, a
    lone send/recv, a member of a ``p2p_batch``, or a collective (the ``H_*`` constants), by its kind's registry
    entry (:attr:`schedsim.kinds.KindInfo.host`)."""
    info = KINDS[op.kind]
    host = info.host
    if host == "kernel":
        if info.cost == "roofline" and not op.flops and op.duration_s is None and op.nbytes:
            return H_ELEMENTWISE  # a bytes-only kernel: an elementwise torch.add (executor/kernels.py, references)
        return H_KERNEL
    if host == "p2p":
        return H_P2P if op.p2p_batch is None else H_BATCH_P2P
    return H_MEMCPY if host == "copy" else H_COLL


def host_issue_columns(rank: np.ndarray, stream: np.ndarray, hclass: np.ndarray, repeat: np.ndarray,
                       host_s: np.ndarray, batch: np.ndarray, cross_stream_deps: np.ndarray,
                       profile: HardwareProfile, mode: str, model_executor: bool = False,
                       call_extra: np.ndarray | None = None, cold: bool = False,
                       graph: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(issue, call_start)``: time (s) at which the host has issued each op, and at which its own call began
    (rule host-issue), float64 of shape (n,). ``call_extra`` (s, shape (n,), repeats included) is added to each op's
    call: a GEMM shape's ``gemm.call`` row (:meth:`schedsim.gpu.cost.CostModel.gemm_call_extra`). ``cold``: the host
    waited for the GPU before this iteration, so its first kernel, collective and elementwise calls also pay
    ``launch.cold_first_call_us`` (:func:`host_waited`).

    Columns of shape (n,), ops in program order per rank: ``rank``; ``stream`` (codes equal for equal names);
    ``hclass`` (:func:`host_class`); ``repeat``; ``host_s`` (declared Python time, s); ``batch`` (code of the
    ``p2p_batch``, -1 none); ``cross_stream_deps`` (dependencies on other streams: one event wait each).
    Per rank the host adds, op by op and in this order, ``host_s``, the event waits, the executor's extra,
    a stream switch, the call and a first-call extra; the prefix sums add the same floats in the same order
    as a loop over the ops would (``np.cumsum`` is sequential). In ``cuda_graph`` mode every op is issued at
    ``graph_launch_us`` and its call starts at 0 (the graph's nodes are on the GPU already).

    ``graph`` (int64, shape (n,); :func:`schedsim.lower.graphs.graph_segments`): per op the id of the CUDA graph
    launch it is captured in (-1: eager), the ops of one launch consecutive on their rank. In eager mode each
    launch is one host call of ``graph_launch_us`` (class :data:`H_GRAPH`), as the whole-schedule graph's one
    launch, at the place of its first op: none of its ops pays a call, an event wait, a stream switch, its
    ``host_s`` or a first-call extra; each is issued when the launch returns and its call starts when the launch
    begins. The eager ops around it pay their costs as without it. The whole-schedule mode is the case of one
    launch holding every op of a rank (the same issue times, without the executor's extra)."""
    lp = profile.launch
    n = len(rank)
    if mode == "cuda_graph":
        return np.full(n, lp.graph_launch_us * 1e-6), np.zeros(n)
    if graph is not None and n and int(graph.max()) >= 0:
        return _with_graphs(rank, stream, hclass, repeat, host_s, batch, cross_stream_deps, profile, mode,
                            model_executor, call_extra, cold, np.asarray(graph, np.int64))
    op_s, coll_s, p2p_s = lp.eager_per_op_us * 1e-6, lp.eager_per_collective_us * 1e-6, lp.p2p_call_s
    batch_s, ev_s, copy_s, sw_s = lp.batch_p2p_call_s, lp.event_wait_s, lp.memcpy_call_s, lp.stream_switch_s
    add_s = lp.elementwise_call_s
    extra = lp.executor_extra_per_op_us * 1e-6 if model_executor else 0.0
    first_op, first_comm = lp.first_op_extra_us * 1e-6, lp.first_collective_extra_us * 1e-6
    # the rules as per-class tables, read by the compiled pass (and its numpy oracle): per host class (H_KERNEL ..
    # H_COLL; a class past H_COLL calls nothing) its call, whether a kernel's is per repeat, and the group whose
    # first op on a rank pays a first-call extra (0: kernels, 1: communication); a batch's call is below
    H = max(6, int(hclass.max()) + 1 if n else 0)
    by_class = np.zeros(H)
    by_class[:6] = op_s, add_s, copy_s, p2p_s, 0.0, coll_s
    cls = np.arange(H)
    per_repeat = (cls <= H_ELEMENTWISE).astype(np.int32)
    first_group = np.where(cls == H_KERNEL, 0, np.where(cls >= H_P2P, 1, np.where(cls == H_ELEMENTWISE, 2, -1)))
    first_group = first_group.astype(np.int32)
    if H > H_GRAPH:  # a graph launch: one call of graph_launch_us, no first-call extra
        by_class[H_GRAPH] = lp.graph_launch_us * 1e-6
        first_group[H_GRAPH] = -1
    cf = lp.cold_first_call_us if cold else {}
    first_cost = np.array([first_op + cf.get("kernel", 0.0) * 1e-6, first_comm + cf.get("collective", 0.0) * 1e-6,
                           cf.get("elementwise", 0.0) * 1e-6])
    if call_extra is not None and not np.any(call_extra):
        call_extra = None
    if not n:
        return np.zeros(0), np.zeros(0)
    rank = np.asarray(rank, np.int64)  # no copy of an int64 column (read, never written)
    order = None if n < 2 or bool(np.all(rank[1:] >= rank[:-1])) else np.argsort(rank, kind="stable")
    if order is not None:  # the sums run per rank in program order (a Program's ranks ascend already)
        rank, stream, hclass, repeat, host_s, batch, cross_stream_deps = (
            a[order] for a in (rank, stream, hclass, repeat, host_s, batch, cross_stream_deps))
        if call_extra is not None:
            call_extra = call_extra[order]
    if int(batch.max()) >= 4 * n + 64:  # sparse batch ids: equal ids stay equal, below the compiled pass's table
        batch = np.where(batch >= 0, np.unique(batch, return_inverse=True)[1].reshape(-1), -1)
    issue, call0 = np.empty(n), np.empty(n)
    ints = (rank, stream, hclass, repeat[:1] if repeat.strides == (0,) else repeat, batch, cross_stream_deps)
    # one compiled pass (the package's only form; its numpy form is the test oracle numpy_helpers.issue_times)
    if not _required("issue_times")(
            *(np.ascontiguousarray(a, np.int64) for a in ints),
            np.ascontiguousarray(host_s[:1] if host_s.strides == (0,) else host_s, np.float64), by_class, per_repeat,
            first_group, first_cost, H_BATCH_P2P, (ev_s, extra, sw_s, batch_s), issue, call0,
            None if call_extra is None else np.ascontiguousarray(call_extra, np.float64)):
        raise AssertionError("issue_times declined ascending ranks with dense batch ids")
    if order is not None:
        issue[order], call0[order] = issue.copy(), call0.copy()
    return issue, call0


def collective_after_call_extra(rank: np.ndarray, hclass: np.ndarray, graph: np.ndarray | None,
                                profile: HardwareProfile, mode: str) -> np.ndarray | None:
    """Per op (seconds, shape (n,)) the extra host time of a collective call (class :data:`H_COLL`) whose previous
    call on its rank was of another kind (a kernel launch, a copy, a send/recv, a graph launch):
    ``launch.collective_after_kernel_us − launch.eager_per_collective_us`` (rule host-issue; 0 for every other op,
    a rank's first op and an op captured in a graph launch, ``graph`` ≥ 0, which calls nothing); plus, on a rank's
    k-th collective call (not captured), ``launch.collective_warmup_us[k - 1]`` where the list has it. None where
    it is 0 for every op: both fields unset, or ``cuda_graph`` mode. Ops in program order per rank, ranks in any
    order.

    Why: ``eager_per_collective_us`` times the all_reduce call in a loop of back-to-back calls; in a schedule it
    mostly follows a matmul (tensor parallelism), and the two calls alternating cost more per pair than their
    loops' sum. One H100 (docs/validation.md, "the misses of the H100 table of 10:52, by kind"): a loop
    alternating the 64×64 matmul and the all_reduce ran 28.1-29.1 µs a pair against 10.4-10.6 + 14.9-15.3 µs
    alone; ``schedsim execute`` ran tp_allreduce_graph's layers (an fp32 GEMV, then an all_reduce) at 24.8-27.3 µs
    where the loops' sum predicted 23.0. The warm-up: the same runs' first three layers held 19-36 µs more host
    time than steady ones, where ``first_op_extra_us`` + ``first_collective_extra_us`` charge 5.5-10.8 once
    (docs/validation.md, "the so_seg reference, and the warm-up and the pair of the host-bound tp layers");
    ``collective_warmup_us`` is calibrate's probe of those layers. Both extras go to the call's ``call_extra``,
    which :func:`kernel_release` spends after the collective's own launch: they delay the rank's later calls, not
    this collective's kernel (a warm-up value on a rank's last collective call moves no kernel).

    >>> from schedsim.hardware.profile import load_profile
    >>> p = load_profile("h200")
    >>> p = p.model_copy(update={"launch": p.launch.model_copy(update={
    ...     "eager_per_collective_us": 15.0, "collective_after_kernel_us": 18.5})})
    >>> ex = collective_after_call_extra(np.array([0, 0, 0, 0, 1]), np.array([H_KERNEL, H_COLL, H_COLL, H_KERNEL,
    ...                                  H_COLL]), None, p, "eager")
    >>> (ex * 1e6).round(6).tolist()  # after the kernel only; the second collective and rank 1's first: none
    [0.0, 3.5, 0.0, 0.0, 0.0]
    >>> w = p.model_copy(update={"launch": p.launch.model_copy(update={"collective_warmup_us": [9.0, 2.0]})})
    >>> ex = collective_after_call_extra(np.array([0, 0, 0, 0, 0, 1]), np.array([H_KERNEL, H_COLL, H_KERNEL, H_COLL,
    ...                                  H_COLL, H_COLL]), None, w, "eager")
    >>> (ex * 1e6).round(6).tolist()  # each rank's first and second collective call, then the steady rule
    [0.0, 12.5, 0.0, 5.5, 0.0, 9.0]
    """
    lp = profile.launch
    warm = np.asarray(lp.collective_warmup_us, np.float64) * 1e-6
    if mode == "cuda_graph" or not len(rank):
        return None
    d = 0.0 if lp.collective_after_kernel_us is None else (lp.collective_after_kernel_us
                                                           - lp.eager_per_collective_us) * 1e-6
    if d == 0.0 and not np.any(warm):
        return None
    rank = np.asarray(rank)
    order = np.argsort(rank, kind="stable")  # each rank's ops, in program order, one run per rank
    r, h = rank[order], np.asarray(hclass)[order]
    g = np.full(len(r), -1, np.int64) if graph is None else np.asarray(graph, np.int64)[order]
    coll_call = (h == H_COLL) & (g < 0)  # a collective's own call (one captured in a graph calls nothing)
    prev_other = np.zeros(len(r), bool)
    prev_other[1:] = (r[1:] == r[:-1]) & ~coll_call[:-1]
    sorted_out = np.where(coll_call & prev_other, d, 0.0)
    if len(warm):  # the k-th collective call of its rank: collective_warmup_us[k - 1]
        first = np.ones(len(r), bool)
        first[1:] = r[1:] != r[:-1]
        c = np.cumsum(coll_call)
        k = c - np.maximum.accumulate(np.where(first, c - coll_call, 0))  # the call's number on its rank, from 1
        hit = coll_call & (k <= len(warm))
        sorted_out[hit] += warm[k[hit] - 1]
    out = np.zeros(len(r))
    out[order] = sorted_out
    return out


def _with_graphs(rank: np.ndarray, stream: np.ndarray, hclass: np.ndarray, repeat: np.ndarray, host_s: np.ndarray,
                 batch: np.ndarray, cross_stream_deps: np.ndarray, profile: HardwareProfile, mode: str,
                 model_executor: bool, call_extra: np.ndarray | None, cold: bool,
                 graph: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`host_issue_columns` with graph launches (its ``graph``): each launch's ops collapsed into one op of
    class :data:`H_GRAPH` at its first op's place (no host_s, event wait, repeat, batch or call extra; the
    launch's stream its first op's), the collapsed columns timed as eager ones, each op of a launch given the
    launch's issue and call start."""
    n = len(rank)
    if n > 1 and not bool(np.all(rank[1:] >= rank[:-1])):  # a launch's ops are consecutive in their rank's order
        o = np.argsort(rank, kind="stable")

        def at(a: np.ndarray | None) -> np.ndarray | None:
            return a if a is None or (len(a) == 1 and n > 1) else a[o]

        iss, c0 = _with_graphs(rank[o], stream[o], hclass[o], at(repeat), at(host_s), batch[o],  # type: ignore[arg-type]
                               cross_stream_deps[o], profile, mode, model_executor, at(call_extra), cold, graph[o])
        issue, call0 = np.empty(n), np.empty(n)
        issue[o], call0[o] = iss, c0
        return issue, call0
    member = graph >= 0
    head = member.copy()
    head[1:] &= (graph[1:] != graph[:-1]) | (rank[1:] != rank[:-1])
    keep = ~member | head
    pos = np.cumsum(keep) - 1

    def col(a: np.ndarray) -> np.ndarray:
        full = np.broadcast_to(a, (n,)) if len(a) == 1 and n > 1 else a
        return np.array(full[keep])

    h = head[keep]
    hc, hs, xd, rp, bt = col(hclass), col(host_s), col(cross_stream_deps), col(repeat), col(batch)
    hc[h], hs[h], xd[h], rp[h], bt[h] = H_GRAPH, 0.0, 0, 1, -1
    ce = None
    if call_extra is not None:
        ce = col(call_extra)
        ce[h] = 0.0
    issue, call0 = host_issue_columns(col(rank), col(stream), hc, rp, hs, bt, xd, profile, mode, model_executor, ce,
                                      cold)
    return issue[pos], call0[pos]


def kernel_release(issue: np.ndarray, call0: np.ndarray, profile: HardwareProfile, mode: str,
                   call_extra: np.ndarray | None = None, graph: np.ndarray | None = None,
                   memset: np.ndarray | None = None) -> np.ndarray:
    """Rule host-issue, the launch inside the call: when each op's (first) kernel reaches the GPU, seconds, shape (n,),
    from :func:`host_issue_columns`' ``issue`` (the call returned), ``call0`` (the call began) and
    ``call_extra`` (its ``gemm.call`` extra, s, shape (n,)): ``call0 + f · (issue − call0 − call_extra)`` with
    ``f`` = ``launch.call_launch_fraction``. A PyTorch call launches its kernel part-way through (dispatch,
    argument checks and the BLAS heuristic before ``cuLaunchKernel``; the output's bookkeeping and the return
    after it), so a kernel can start while its own call is still running; a GEMM whose call costs more than the
    one-kernel call (a split-K GEMM launches its reduction kernel after the main one) spends that extra after
    its main kernel's launch (an extra below 0, a call cheaper than the 64×64 one, counts as 0).
    ``issue`` itself (``f`` = 1, the default, and no extra) and in ``cuda_graph`` mode, where nothing is called
    per op, and for the ops of a graph launch (``graph`` ≥ 0, :func:`host_issue_columns`); with
    ``launch.graph_start_us`` set, those graph ops reach the GPU that long after the launch call began instead
    (``call0 + graph_start_us``; in ``cuda_graph`` mode the call begins at 0): a replay's first node starts on
    the GPU later than its host call returns (one H100: ~8-10 µs from the iteration's anchor against a 5.1 µs
    call, docs/validation.md, "the host-bound misses ... by kind").

    Source: timed eager runs on one H200, [evidence: timed-eager] (``benchmarks/accuracy/heldout.sh new_shapes``
    SET=c, d): on an idle GPU the window from a GEMM's start event to its end was 23-37 µs for split-K GEMMs
    (bf16/fp16 1024×512×8192: call 1.26-1.44 × the one-kernel call, kernel 11-20 µs, so the main kernel began
    about half-way through the call), while one-kernel GEMMs (bf16 32×2048×2048, fp32 8×2048×1024) fitted a
    launch at 0.8-1 of the call; ``calibrate`` measures ``f`` on a one-kernel bf16 2048³ matmul
    (executor/calibrate_host.py: 0.87-1.0 in calibrate's process and its three fresh ones, 0.78-0.97 in six
    ``execute --measure-host`` processes that day).

    ``memset`` (s, shape (n,), or None): per op the ``gemm.memset`` gap of a GEMM whose call launches a memset
    (cuBLAS zeroing its split-K workspace) at that point and its main kernel this much later, the host's second
    launch: the op's release is that much later (eager ops only, not graph ops). On a busy GPU the kernel is queued
    by the time its stream reaches it, so the gap costs nothing there; on an idle one it delays the kernel. One
    H100 (docs/validation.md, "a split-K GEMM's memset on an idle GPU"): the memset's end to the main kernel's
    start 7.8-13.0 µs with nothing queued ahead, 1.5 µs behind another GEMM; the call returned after the main
    kernel's launch."""
    rel = _release(issue, call0, profile, mode, call_extra, graph)
    if memset is None or mode == "cuda_graph":
        return rel
    add = memset if graph is None else np.where(graph >= 0, 0.0, memset)
    return rel + add


def _release(issue: np.ndarray, call0: np.ndarray, profile: HardwareProfile, mode: str,
             call_extra: np.ndarray | None, graph: np.ndarray | None) -> np.ndarray:
    """:func:`kernel_release` without the memset gaps."""
    f = profile.launch.call_launch_fraction
    gs = profile.launch.graph_start_us
    if mode == "cuda_graph":  # one launch per rank, its call at 0
        return issue if gs is None else np.full(len(issue), gs * 1e-6)
    if f >= 1.0 and call_extra is None and (gs is None or graph is None):
        return issue
    # a call cheaper than the one-kernel call (a row below 1) launches at f of itself: never after it returned
    pre = issue - call0  # then in place, the same operations in the same order: one array of n, not three
    if call_extra is not None:
        pre -= np.maximum(call_extra, 0.0)
    pre *= f
    pre += call0
    if graph is not None:  # a graph's ops reach the GPU when its launch returns (or graph_start_us after its call
        g = graph >= 0  # began), as a whole-schedule graph's
        pre[g] = issue[g] if gs is None else call0[g] + gs * 1e-6
    return pre


def end_event_bound(end: np.ndarray, issue: np.ndarray, profile: HardwareProfile, mode: str) -> np.ndarray:
    """An eager run timed op by op (``launch.eager_timed``): each op's end, seconds, shape (n,), no earlier than
    its end event's record, which the host makes after the call returned (``issue``), half the timing cost per
    op later (``launch.executor_extra_per_op_us`` of :meth:`~schedsim.hardware.profile.HardwareProfile.
    timed_eager`: a record before the call and one after). ``end`` itself otherwise. Applied to the reported
    ends after the event loop: the ops of its rank that wait for it are issued by its host later still.

    So an op whose kernel is shorter than its own call spans the call on an idle GPU, as measured: one H200,
    [evidence: timed-eager], timing cost 2.1-12.5 µs per op: ``add`` ops of allgather_mm bf16 chunks 32 9.7 µs
    (call 8.7 + 1.0; kernel 2.3), one-rank all_reduce ops of tp_allreduce_graph 37.1 µs (call 31.5 + 6.2; no
    kernel)."""
    lp = profile.launch
    if mode == "cuda_graph" or not lp.eager_timed:
        return end
    return np.maximum(end, issue + 0.5 * lp.executor_extra_per_op_us * 1e-6)


#: the most ops whose host call ends a prediction's meta lists (``host_call_end_s``; what ``execute`` runs)
HOST_CALL_META_MAX = 20_000


def host_end_per_rank(issue: np.ndarray, rank: np.ndarray, world: int) -> np.ndarray:
    """Per rank (shape (world,)), seconds: when its host returned from its last call, the latest of ``issue``
    (:func:`host_issue_columns`, shape (n,)) over its ops; 0 for a rank without ops."""
    out = np.zeros(world)
    if not len(issue):
        return out
    rank = np.asarray(rank)
    cut = np.flatnonzero(rank[1:] != rank[:-1]) + 1
    if bool(np.all(rank[cut] > rank[cut - 1])):  # ranks ascending (a Program's are): one max per run of a rank
        starts = np.concatenate(([0], cut))
        out[rank[starts]] = np.maximum.reduceat(issue, starts)
    else:
        np.maximum.at(out, rank.astype(np.int64), issue)
    return out


def host_waited(end: np.ndarray, host_end: np.ndarray, profile: HardwareProfile, mode: str) -> bool:
    """Whether a prediction's host waited ``launch.cold_wait_us`` or longer for the GPU at the iteration's end
    (``end``: the ops' ends; ``host_end``: :func:`host_end_per_rank`), so that the next iteration's first calls
    run cold (``launch.cold_first_call_us``, rule host-issue); False in a graph replay or without those costs. What
    ``schedsim execute`` and the hand-written references measure: every iteration starts after the GPU is done.

    >>> from schedsim.hardware.profile import load_profile
    >>> p = load_profile("h200")
    >>> end, host = np.array([3e-3]), np.array([1e-3])
    >>> host_waited(end, host, p, "eager"), host_waited(host, host, p, "eager"), host_waited(end, host, p, "cuda_graph")
    (True, False, False)
    """
    cw = cold_wait_s(profile, mode)
    if cw is None or not len(end):
        return False
    return float(np.max(end)) - float(np.max(host_end)) >= cw


def cold_wait_s(profile: HardwareProfile, mode: str) -> float | None:
    """The host's wait (s, ``launch.cold_wait_us`` · 1e-6) from which :func:`host_waited` is true, or None where it
    is never true (a graph replay, or a profile without ``launch.cold_first_call_us``). Since it compares the
    latest end, an op that ends ``end`` with ``end - max(host_end) >=`` this settles it (the event loop's halt,
    :func:`schedsim.sim.waves_columns.run_waves_program`)."""
    lp = profile.launch
    if mode != "eager" or not any(lp.cold_first_call_us.values()):
        return None
    return lp.cold_wait_us * 1e-6
