"""Rule host-issue's host issue times as columns (schedsim.gpu.host.host_issue_columns) against the rule written as
a loop over the ops: the same floats bit for bit, with the issue times compiled (the package's) or in their numpy
form (the oracle ``tests/oracle/numpy_helpers.issue_times``, its prefix sums in one chunk or in many: chunks of whole
ranks, a rank larger than a chunk alone), with ranks in order or interleaved, batch ids dense or sparse, and a
GEMM's per-op call extra."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.gpu import host as gh
from schedsim.hardware.profile import load_profile
from tests.oracle import numpy_helpers as nh

PROFILE = load_profile("h200x2")


def by_loop(rank, stream, hcls, repeat, host_s, batch, deps, model_executor, call_extra):  # type: ignore[no-untyped-def]
    """Rule host-issue op by op (gpu_model's docstring): per rank, host Python time, event waits, the executor's extra,
    a stream switch, the call (one per p2p batch; plus the op's call extra), a first-call extra; the call starts
    after the switch."""
    lp = PROFILE.launch
    call_of = {gh.H_KERNEL: lp.eager_per_op_us * 1e-6, gh.H_ELEMENTWISE: lp.elementwise_call_s,
               gh.H_MEMCPY: lp.memcpy_call_s, gh.H_P2P: lp.p2p_call_s, gh.H_COLL: lp.eager_per_collective_us * 1e-6}
    issue, call0 = [0.0] * len(rank), [0.0] * len(rank)
    t: dict[int, float] = {}
    last: dict[int, int] = {}
    paid: set[tuple[int, int]] = set()
    first_k: set[int] = set()
    first_c: set[int] = set()
    for i in sorted(range(len(rank)), key=lambda i: rank[i]):  # stable: program order within a rank
        r, h = rank[i], hcls[i]
        s = t.get(r)
        incs = [host_s[i], deps[i] * lp.event_wait_s,
                lp.executor_extra_per_op_us * 1e-6 if model_executor else 0.0,
                lp.stream_switch_s if r in last and last[r] != stream[i] else 0.0]
        if h == gh.H_BATCH_P2P:
            c = 0.0 if (r, batch[i]) in paid else lp.batch_p2p_call_s
            paid.add((r, batch[i]))
        else:
            c = call_of[h] * (repeat[i] if h in (gh.H_KERNEL, gh.H_ELEMENTWISE) else 1) + call_extra[i]
        extra = 0.0
        if h == gh.H_KERNEL and r not in first_k:
            first_k.add(r)
            extra = lp.first_op_extra_us * 1e-6
        elif h >= gh.H_P2P and r not in first_c:
            first_c.add(r)
            extra = lp.first_collective_extra_us * 1e-6
        for k, x in enumerate(incs + [c, extra]):
            s = x if s is None else s + x
            if k == 3:
                call0[i] = s
        t[r], last[r] = s, stream[i]
        issue[i] = s
    return issue, call0


@pytest.mark.parametrize("chunk", [None, 1, 3, nh._ISSUE_CHUNK])  # None: the compiled prefix sums
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_columns_equal_the_loop(monkeypatch, chunk, data):
    if chunk is not None:
        monkeypatch.setattr(nh, "_ISSUE_CHUNK", chunk)
        monkeypatch.setattr(gh, "_required", lambda name: getattr(nh, name))
    n = data.draw(st.integers(0, 40))
    ints = lambda lo, hi: np.array(data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), np.int64)  # noqa: E731
    rank = ints(0, 4)
    if data.draw(st.booleans()):
        rank = np.sort(rank)  # ranks in order (the Program's layout), or interleaved (sorted inside)
    stream, hcls, repeat, batch, deps = ints(0, 2), ints(0, 5), ints(1, 3), ints(0, 2), ints(0, 3)
    if data.draw(st.booleans()):  # batch ids past the compiled pass's table (renumbered first)
        batch = np.array([7, 2**40, 2**62])[batch]
    batch[hcls != gh.H_BATCH_P2P] = -1  # only batched send/recv are in a batch
    host_s = np.array(data.draw(st.lists(st.sampled_from([0.0, 1e-6, 3.3e-5]), min_size=n, max_size=n)))
    ex = data.draw(st.booleans())
    # a GEMM shape's gemm.call extra (s) on kernels, as CostModel.gemm_call_extra gives it; or none
    extra = np.where(hcls == gh.H_KERNEL, np.array(data.draw(st.lists(st.sampled_from([0.0, 2.5e-7, 1.3e-6]),
                                                                      min_size=n, max_size=n))).reshape(n), 0.0)
    with_extra = data.draw(st.booleans())
    issue, call0 = gh.host_issue_columns(rank, stream, hcls, repeat, host_s, batch, deps, PROFILE, "eager", ex,
                                         extra if with_extra else None)
    want = by_loop(rank.tolist(), stream.tolist(), hcls.tolist(), repeat.tolist(), host_s.tolist(), batch.tolist(),
                   deps.tolist(), ex, extra.tolist() if with_extra else [0.0] * n)
    assert (issue.tolist(), call0.tolist()) == want
