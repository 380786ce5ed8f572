"""The package's per-op column passes against their earlier forms (``tests/oracle/column_forms.py``), bit for bit:
the tensor-core duty of random timelines (GEMMs above and below the fp32 peak, overlapping, out of order, with NaN
solo times and repeats) and of the simulated benchmark, and the loop's one-entry buffers on random buffers and
masks (-0.0 beside 0.0, NaNs, none read, all read), and the fill gain of one wave time and one tail (``_tails``'
``one``) against the one entry of the gains' column."""

from __future__ import annotations

import numpy as np
import pytest

from schedsim.api import predict
from schedsim.gpu.power import tensor_duty
from schedsim.hardware.profile import load_profile
from schedsim.sim.timeline import Span, Timeline
from schedsim.sim.waves_columns import _one_entry, _tails
from schedsim.spec.loader import load_schedule
from tests.conftest import ROOT
from tests.oracle import column_forms as old

FP32 = 67e12  # FLOP/s


def _random_timeline(rng: np.random.Generator, n: int, world: int, ordered: bool) -> Timeline:
    spans = []
    for i in range(n):
        rank = int(rng.integers(world))
        s = float(rng.integers(0, 40)) * 0.25e-3 + float(rng.random()) * 1e-4
        d = float(rng.integers(1, 12)) * 0.25e-3
        kind = "matmul" if rng.random() < 0.7 else "compute"
        tflops = float(rng.choice([40.0, 500.0, 900.0]))  # 40: under the fp32 peak (not a tensor-core GEMM)
        solo = float("nan") if rng.random() < 0.1 else d * float(rng.choice([1.0, 0.5]))
        spans.append(Span(f"o{i}@r{rank}", f"o{i}", rank, "s", kind, "compute", s, s + d, solo_s=solo,
                          flops=tflops * 1e12 * d))
    if ordered:
        spans.sort(key=lambda x: (x.rank, x.start_s))
    return Timeline("t", "predict", world, spans=spans)


@pytest.mark.parametrize("seed", range(40))
def test_tensor_duty_equals_its_earlier_form_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    tl = _random_timeline(rng, int(rng.integers(1, 60)), int(rng.integers(1, 5)), ordered=seed % 2 == 0)
    reps = rng.integers(1, 3, len(tl)) if seed % 3 == 0 else None
    for gap, below in ((0.0, 0.0), (2e-3, 0.0), (0.0, 0.9), (0.0, 0.2)):
        got = tensor_duty(tl, FP32, gap, below, reps)
        want = old.tensor_duty(tl, FP32, gap, below, reps)
        assert np.float64(got).tobytes() == np.float64(want).tobytes()


def test_tensor_duty_of_the_simulated_benchmark_equals_its_earlier_form():
    tl = predict(load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml", {"world_size": 4, "chunks": 50}),
                 "h200").timeline
    fp32 = load_profile("h200").gpu.peak_tflops["fp32"] * 1e12
    got, want = tensor_duty(tl, fp32), old.tensor_duty(tl, fp32)
    assert got == want and 0.0 < got < 1.0


def _cases(rng: np.random.Generator):
    for n in (0, 1, 2, 7, 64):
        for dtype in (np.float64, np.int32):
            for fill in ("same", "random", "signed zeros", "nans", "same where read"):
                if dtype == np.int32:
                    a = rng.integers(0, 3, n).astype(np.int32)
                else:
                    a = rng.choice([0.0, 1.5, 2.0], n)
                if fill == "same":
                    a[:] = a[0] if n else 0
                elif fill == "signed zeros" and dtype == np.float64:
                    a[:] = 0.0
                    a[n // 2:] = -0.0
                elif fill == "nans" and dtype == np.float64:
                    a[:] = np.nan
                read_sets = [None, np.ones(n, bool), np.zeros(n, bool), rng.random(n) < 0.5,
                             np.arange(n) % 2 == 1]
                for read in read_sets:
                    b = a.copy()
                    if fill == "same where read" and read is not None and read.any():
                        b[read] = b[np.argmax(read)]
                    yield b, read


def test_one_entry_equals_its_earlier_form_bit_for_bit():
    rng = np.random.default_rng(7)
    seen = 0
    for a, read in _cases(rng):
        got, want = _one_entry(a, read), old.one_entry(a, read)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes() and (got is a) == (want is a)
        seen += len(got) == 1 and len(a) > 1
    assert seen > 20  # the one-entry form was taken, not only the buffer as it is


@pytest.mark.parametrize("seed", range(30))
def test_one_fill_gain_equals_the_one_entry_of_its_column(seed):
    """``_tails(..., one=(tau, tail))``: every compute kernel of one wave time and its templates of one tail (as
    ``_kernels`` checks before it asks): the gain's one entry is the one ``_one_entry`` finds in the column
    ``fill_gain_columns`` makes, bit for bit, whatever the other kernels hold (waves of no time, tails past the
    cap, no tail at all)."""
    rng = np.random.default_rng(seed)
    n, T = int(rng.integers(1, 50)), int(rng.integers(1, 5))
    tmpl = rng.integers(0, T, n).astype(np.int32)
    tres = rng.integers(0, 3, T).astype(np.int32)
    tres[tmpl[0]] = 0  # at least one compute kernel
    tail = float(rng.choice([0.0, 2e-6, 9e-6, 1e-3]))
    twt = np.where(tres == 0, tail, 0.0)
    ktype = tres[tmpl]
    tau = float(rng.choice([0.0, 1e-5, 4e-5, 3e-3]))
    ktau = np.where(ktype == 0, tau, rng.choice([0.0, 7e-6, -1.0], n))
    compute = ktype == 0
    none = np.zeros(0, np.int32)
    *_, column = _tails(np.zeros(T, np.int32), None, twt, tmpl, none, none, ktype, ktau, n)
    *_, one = _tails(np.zeros(T, np.int32), None, twt, tmpl, none, none, ktype, ktau, n,
                     (_one_entry(ktau, compute), twt[tres == 0][:1]))
    want = _one_entry(column, compute)
    assert len(want) == 1 and len(one) == 1 and one.tobytes() == want.tobytes()
