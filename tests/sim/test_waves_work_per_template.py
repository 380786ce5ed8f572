"""The ops' solo times per template (issue 38, ``_cwaves.c`` LAYOUT 19): where rule graph-nodes' terms are per
template (no send/recv), the waves preparation keeps one solo time per template, the compiled ``kernels`` and
``run`` read an op's through its template, and the run's per-op column is made after the loop
(:func:`schedsim.sim.waves_columns.op_work`). The same run through the per-op path (the terms per op, as a schedule
with send/recv takes) gives the same columns bit for bit: the benchmark and the shipped schedules that take the
per-template path (eager; a CUDA graph's fork terms are per op): collectives of several ranks, all_gather (a size
per member), copies (offload), CUDA graph segments; and an all_to_all whose ranks send different sizes (its
members' solo times differ: the group's is the largest, which each member's column holds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from schedsim.gpu import rules as gm
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim import waves_columns as wc
from schedsim.sim.engine import simulate
from schedsim.sim.loop import compiled_loop
from schedsim.spec.loader import load_schedule, load_text

ROOT = Path(__file__).resolve().parents[2]
CASES = ["benchmarks/data/overlap_gen.yaml", "schedules/allgather_mm8.yaml", "schedules/tp_allreduce_graph.yaml",
         "schedules/graph_beside_nccl.yaml", "schedules/offload.yaml", "schedules/tp_ffn.yaml",
         "schedules/small_ops_segment.yaml", "a2a"]


#: a GEMM, then an all_to_all of 3 ranks sending 12 kB, 12 B and 800 B (tests/spec/test_all_to_all_splits.py's matrix)
A2A = ("schema_version: 1\nname: a2a\nworld_size: 3\nops:\n"
       "  - {name: g, kind: matmul, m: 256, n: 512, k: 1024, ranks: [0, 1, 2]}\n"
       "  - {name: x, kind: all_to_all, send_bytes: [[0, 4000, 8000], [12, 0, 0], [400, 400, 0]], deps: [g]}\n")


def _columns(path: str, launch: str) -> dict[str, np.ndarray]:
    spec = load_text(A2A, "a2a.yaml") if path == "a2a" else load_schedule(ROOT / path)
    tl = simulate(lower(spec), load_profile("h200"), gpu_model="waves", launch=launch)
    c = tl.columns
    return {k: np.asarray(getattr(c, k), np.float64).view(np.int64) for k in ("start_s", "end_s", "solo_s", "ready_s")}


@pytest.mark.parametrize("path", CASES)
def test_solo_times_per_template_run_as_per_op(path, monkeypatch):
    launch = "eager"
    calls: list[bool] = []
    prepare = wc._prepare

    def seen(*a, **k):  # type: ignore[no-untyped-def]
        p = prepare(*a, **k)
        calls.append(p.per_t)
        return p

    monkeypatch.setattr(wc, "_prepare", seen)
    per_t = _columns(path, launch)
    monkeypatch.setattr(gm, "template_memory_terms", lambda *a, **k: None)  # the per-op path
    per_op = _columns(path, launch)
    assert calls[0] and not calls[-1]  # the first run kept the templates' times, the second the ops'
    for k in per_t:
        assert np.array_equal(per_t[k], per_op[k]), (path, launch, k)


def test_op_work_gives_each_member_its_groups_time():
    # three ops of templates 0, 1, 0; ops 0 and 2 one group whose time is 5.0 (e.g. the largest member's)
    work = np.array([1.0, 2.0])
    out = wc.op_work(work, np.array([0, 1, 0], np.int32), np.array([0, 2], np.int32), np.array([0, 2], np.int32),
                     np.array([5.0]))
    assert out.tolist() == [5.0, 2.0, 5.0]
    assert work.tolist() == [1.0, 2.0]  # the templates' left as they were


def test_kernels_read_work_per_template_as_per_op():
    # compute ops of templates 1, 0, 1 (2 and 4 waves): ktau = work / waves, read per op or through the template
    loop = compiled_loop()
    i32 = np.int32
    tmpl = np.array([1, 0, 1], i32)
    twork = np.array([3.0, 8.0])
    outs = []
    for wt, work in ((0, twork[tmpl]), (1, twork)):
        out = [np.zeros(3 + (k in (1,)), np.float64 if k == 7 else i32) for k in range(12)]
        out[10] = np.zeros(4, i32)
        K, Q = loop.kernels((3, 1, 0, 1, wt), np.zeros(3, i32), np.full(3, -1, i32), np.zeros(3, i32), tmpl,
                            work, np.zeros(3, i32), np.array([4, 4], i32), np.array([2.0, 4.0]),
                            np.zeros(2, i32), *out)
        assert (K, Q) == (3, 1)
        outs.append(out)
    assert outs[0][7].tolist() == outs[1][7].tolist() == [2.0, 1.5, 2.0]
    with pytest.raises(ValueError, match="wrong lengths"):  # per template, but one entry per op given
        loop.kernels((3, 1, 0, 1, 1), np.zeros(3, i32), np.full(3, -1, i32), np.zeros(3, i32), tmpl, twork[tmpl],
                     np.zeros(3, i32), np.array([4, 4], i32), np.array([2.0, 4.0]), np.zeros(2, i32), *outs[0])


def test_kernels_without_batches_leave_the_identity_maps_unwritten():
    # no p2p batch: kern, kptr and kneed may be empty (every op its own kernel), qptr only as long as the queues
    loop = compiled_loop()
    i32 = np.int32
    n = 5
    out = [np.zeros(0 if k in (0, 1, 2, 3, 4, 5) else n, np.float64 if k == 7 else i32) for k in range(12)]
    out[10] = np.zeros(2 + 1, i32)  # world 2 x 1 connection: at most 2 queues
    K, Q = loop.kernels((n, 2, 0, 1), np.array([0, 0, 0, 1, 1], i32), np.full(n, -1, i32),
                        np.array([0, 1, 0, 1, 1], i32), np.zeros(n, i32), np.ones(n), np.zeros(n, i32),
                        np.array([8], i32), np.array([1.0]), np.zeros(1, i32), *out)
    assert (K, Q) == (5, 2)
    assert out[6].tolist() == [8, 1, 8, 1, 1]  # compute: its CTAs; a comm kernel: its one op
    assert out[10].tolist() == [0, 3, 5] and out[11].tolist() == [0, 1, 2, 3, 4]
    out[10] = np.zeros(2, i32)  # room for one queue: refused, not written past
    with pytest.raises(ValueError, match="wrong lengths"):
        loop.kernels((n, 2, 0, 1), np.array([0, 0, 0, 1, 1], i32), np.full(n, -1, i32), np.zeros(n, i32),
                     np.zeros(n, i32), np.ones(n), np.zeros(n, i32), np.array([8], i32), np.array([1.0]),
                     np.zeros(1, i32), *out)


def test_rank_rows_keep_rank_0s_rows_where_every_rank_has_them():
    # 4 ops, 2 per rank: op 0 -> op 1 on rank 0, op 2 -> op 3 on rank 1: rank 0's rows alone, [0, 1, 1] and [1]
    i32 = np.int32
    sptr, sidx, rank = np.array([0, 1, 1, 2, 2], i32), np.array([1, 3], i32), np.array([0, 0, 1, 1], i32)
    p, s = wc._rank_rows(sptr, sidx, rank, 2)
    assert p.tolist() == [0, 1, 1] and s.tolist() == [1]
    for why, args in (("rank 1's row differs", (sptr, np.array([1, 2], i32), rank)),
                      ("ranks interleaved", (sptr, sidx, np.array([0, 1, 0, 1], i32))),
                      ("rank 1 has no edge", (np.array([0, 1, 1, 1, 1], i32), sidx[:1], rank))):
        p, s = wc._rank_rows(*args, 2)
        assert p is args[0] and s is args[1], why  # as they are
