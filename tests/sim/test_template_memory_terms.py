"""Rule graph-nodes' terms per template (``rules.template_memory_terms``, which the waves preparation adds to the
templates' solo times before one gather): gathered per op, the per-op terms bit for bit on the benchmark input and
the shipped schedules without send/recv, both launch modes; None where ranks have different cold fractions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from schedsim.gpu import rules as gm
from schedsim.gpu.cost import cost_model
from schedsim.hardware.profile import load_profile
from schedsim.kinds import P2P_KINDS
from schedsim.lower import lower
from schedsim.sim.waves_columns import template_classes
from schedsim.spec.loader import load_schedule

ROOT = Path(__file__).resolve().parents[2]


def _bits(x: np.ndarray | float, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, np.float64), (n,)).view(np.int64)


def test_template_terms_gathered_are_the_per_op_terms():
    cost = cost_model(load_profile("h200"))
    seen = 0
    for path in [ROOT / "benchmarks/data/overlap_gen.yaml", *sorted(ROOT.glob("schedules/*.yaml"))]:
        prog = lower(load_schedule(path))
        tcls, tps = template_classes(prog.templates)
        if any(t.kind in P2P_KINDS for t in tps) or not prog.N:
            continue
        tmpl, rank = tcls[prog.tmpl], prog.rank.astype(np.int64)
        for mode in ("eager", "cuda_graph"):
            per_op = gm.memory_terms(tps, tmpl, rank, prog.world_size, cost, mode)
            per_t = gm.template_memory_terms(tps, tmpl, rank, prog.world_size, cost, mode)
            if per_t is None:
                continue
            seen += 1
            for a, b in zip(per_t, per_op, strict=True):
                got = a if np.isscalar(a) else np.asarray(a)[tmpl]
                assert np.array_equal(_bits(got, prog.N), _bits(b, prog.N)), (path, mode)
    assert seen >= 4


def test_ranks_of_different_cold_fractions_have_no_template_terms():
    prof = load_profile("h200")
    cost = cost_model(prof)
    tps = list(lower(load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml")).templates)
    gemm = next(i for i, t in enumerate(tps) if t.kind == "matmul")
    tps[gemm] = replace(tps[gemm], m=512, n=512, k=512, nbytes=3 * 512 * 512 * 2)  # 1.5 MB of operands; L2 60 MB
    # rank 0 runs 64 GEMMs, rank 1 one: working sets 64x apart
    tmpl = np.array([gemm] * 65)
    rank = np.array([0] * 64 + [1], np.int64)
    foot = cost.footprint(tps[gemm])
    cold = gm.l2_cold_fraction(np.array([64 * foot, foot]), prof)
    assert cold[0] != cold[1]  # the case itself
    assert gm.template_memory_terms(tps, tmpl, rank, 2, cost, "eager") is None
    node, extra = gm.memory_terms(tps, tmpl, rank, 2, cost, "eager")
    assert np.asarray(extra).shape == (65,)
