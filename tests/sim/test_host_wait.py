"""Rule host-wait (:mod:`schedsim.sim.host_wait`) and the language's ``kind: synchronize``, by hand.

The ``h200`` profile's host calls (``launch.eager_per_op_us`` 13.29 µs, ``first_op_extra_us`` 6.71 µs, one stream:
no switch, no event wait): op ``a``'s call returns at 13.29 + 6.71 = 20 µs, each later call 13.29 µs after the one
before. With a ``synchronize`` (``host_us`` 10) between ``a`` and ``b``, the host blocks until ``a`` ends, returns
10 µs later, and ``b``'s call then takes 13.29 µs: issue(b) = end(a) + 10 + 13.29 µs. The ``replay`` model has no
call costs (recorded ``host_us`` only, 0 here): ``b`` starts at end(a) + 10 µs exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from schedsim import api
from schedsim.cli import app
from schedsim.errors import GraphError, SpecError
from schedsim.hardware.profile import load_profile
from schedsim.sim.engine import simulate

CALL_US = 13.29  # h200 launch.eager_per_op_us

CHAIN = """schema_version: 1
name: chain
world_size: 1
ops:
  - {{name: a, kind: compute, duration_us: 100}}
{sync}  - {{name: b, kind: compute, duration_us: 50}}
  - {{name: c, kind: compute, duration_us: 20}}
"""


def _run(tmp_path: Path, text: str, model: str | None = None, name: str = "s.yaml") -> tuple[dict, dict]:
    f = tmp_path / name
    f.write_text(text)
    spec = api.load(f)
    tl = simulate(api.lower_spec(spec, f), load_profile("h200"), gpu_model=model)
    spans = {s.id: s for s in tl.spans}
    calls = dict(zip(tl.columns.id, np.asarray(tl.host_call_end_s).tolist(), strict=True)) \
        if tl.host_call_end_s is not None else {}
    return spans, calls


def test_waves_issue_after_a_synchronize_is_the_earlier_ops_end_plus_host_costs(tmp_path: Path) -> None:
    spans, calls = _run(tmp_path, CHAIN.format(sync="  - {name: s, kind: synchronize, host_us: 10}\n"))
    end_a = spans["a@r0"].end_s
    assert calls["a@r0"] * 1e6 == pytest.approx(20.0, abs=1e-9)
    assert end_a * 1e6 > 100.0  # a's kernel started during its call, ran 100 µs: the host reached the sync first
    assert calls["b@r0"] == pytest.approx(end_a + (10 + CALL_US) * 1e-6, abs=1e-12)
    assert calls["c@r0"] == pytest.approx(calls["b@r0"] + CALL_US * 1e-6, abs=1e-12)
    assert spans["b@r0"].start_s >= end_a + 10e-6
    # without the synchronize the host runs ahead: b is issued at 20 + 13.29 µs, under a
    plain, calls0 = _run(tmp_path, CHAIN.format(sync=""), name="p.yaml")
    assert calls0["b@r0"] * 1e6 == pytest.approx(20.0 + CALL_US, abs=1e-9)
    assert spans["b@r0"].start_s - plain["b@r0"].start_s > 10e-6


def test_replay_starts_the_next_op_at_the_end_plus_host_us(tmp_path: Path) -> None:
    spans, _ = _run(tmp_path, CHAIN.format(sync="  - {name: s, kind: synchronize, host_us: 10}\n"), "replay")
    assert [spans[k].start_s * 1e6 for k in ("a@r0", "b@r0", "c@r0")] == pytest.approx([0.0, 110.0, 160.0],
                                                                                      abs=1e-9)


def test_a_synchronize_the_gpu_already_passed_costs_nothing(tmp_path: Path) -> None:
    """A 1 µs op ends (at ~19 µs) before the host reaches the synchronize (20 µs): no wait, the same times."""
    short = CHAIN.replace("duration_us: 100", "duration_us: 1")
    spans, calls = _run(tmp_path, short.format(sync="  - {name: s, kind: synchronize}\n"))
    plain, calls0 = _run(tmp_path, short.format(sync=""), name="p.yaml")
    assert spans["a@r0"].end_s < calls["a@r0"]
    assert calls == calls0
    assert {k: (s.start_s, s.end_s) for k, s in spans.items()} == {k: (s.start_s, s.end_s) for k, s in plain.items()}


SCOPES = """schema_version: 1
name: scopes
world_size: 1
ops:
  - {name: a, kind: compute, duration_us: 100, stream: s1}
  - {name: x, kind: compute, duration_us: 300, stream: s2}
  - {name: w1, kind: synchronize, scope: stream, stream: s1, host_us: 10}
  - {name: b, kind: compute, duration_us: 50, stream: s3}
  - {name: w2, kind: synchronize, deps: [b, x]}
  - {name: c, kind: compute, duration_us: 20, stream: s1}
  - {name: w3, kind: synchronize}
  - {name: d, kind: compute, duration_us: 20, stream: s1}
"""


def test_replay_scopes_wait_for_their_own_work(tmp_path: Path) -> None:
    """stream s1: a alone (ends 100: b at 110, not after x); events b, x: x ends at 300; device: c ends 320."""
    spans, _ = _run(tmp_path, SCOPES, "replay")
    got = {k: spans[f"{k}@r0"].start_s * 1e6 for k in "axbcd"}
    assert got == pytest.approx({"a": 0.0, "x": 0.0, "b": 110.0, "c": 300.0, "d": 320.0}, abs=1e-9)


def test_waves_scopes_wait_for_their_own_work(tmp_path: Path) -> None:
    spans, calls = _run(tmp_path, SCOPES)
    end = {k: spans[f"{k}@r0"].end_s for k in "axbcd"}
    assert end["a"] + 10e-6 < calls["b@r0"] < end["x"]  # the stream's op, not the other stream's
    assert calls["c@r0"] > max(end["b"], end["x"])
    assert calls["d@r0"] > end["c"]
    assert calls["d@r0"] - end["c"] == pytest.approx(CALL_US * 1e-6, abs=1e-12)  # same stream: one call


TWO = """schema_version: 1
name: two
world_size: 2
ops:
  - {{name: a, kind: compute, duration_us: 100}}
{sync}  - {{name: b, kind: compute, duration_us: 10}}
  - {{name: ar, kind: all_reduce, bytes: 1024, deps: [b]}}
"""


def test_a_synchronize_on_one_rank_holds_the_others_only_through_the_collective(tmp_path: Path) -> None:
    spans, calls = _run(tmp_path, TWO.format(sync="  - {name: s, kind: synchronize, ranks: [1]}\n"))
    plain, calls0 = _run(tmp_path, TWO.format(sync=""), name="p.yaml")
    assert calls["b@r0"] == calls0["b@r0"] and calls["ar@r0"] == calls0["ar@r0"]  # rank 0's host never waited
    assert calls["b@r1"] == pytest.approx(spans["a@r1"].end_s + CALL_US * 1e-6, abs=1e-12)
    assert spans["ar@r0"].start_s == spans["ar@r1"].start_s > plain["ar@r0"].start_s


@pytest.mark.parametrize(("entry", "words"), [
    ("{name: s, kind: synchronize, scope: stream}", "scope 'stream' needs `stream:`"),
    ("{name: s, kind: synchronize, stream: x}", "`stream` is for scope 'stream'"),
    ("{name: s, kind: synchronize, scope: device, deps: [a]}", "`deps` is for scope 'events'"),
    ("{name: s, kind: synchronize, scope: events}", "scope 'events' needs `deps:`"),
    ("{name: s, kind: synchronize, host_us: -1}", "host_us"),
    ("{name: s, kind: synchronize, scope: bogus}", "scope"),
    ("{name: s, kind: synchronize, deps: [zz]}", "waits for op 'zz', which rank 0 does not issue before it"),
    ("{name: s, kind: synchronize}\n  - {name: t, kind: synchronize}", "follows synchronize 's' on rank 0"),
])
def test_check_refuses_a_bad_synchronize_with_exit_2(tmp_path: Path, entry: str, words: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(CHAIN.format(sync=f"  - {entry}\n"))
    r = CliRunner().invoke(app, ["check", str(f)])
    assert r.exit_code == 2, r.output
    assert words in r.output and "fix:" in r.output and "Traceback" not in r.output, r.output
    with pytest.raises((SpecError, GraphError)):
        api.lower_spec(api.load(f), f)


def test_a_synchronize_lowers_to_the_next_ops_tags(tmp_path: Path) -> None:
    """The tags of rule host-wait on the rank's next op (and only there), inside a foreach too."""
    f = tmp_path / "loop.yaml"
    f.write_text("""schema_version: 1
name: loop
world_size: 2
ops:
  - foreach: {i: range(2)}
    ops:
      - {name: "f{i}", kind: compute, duration_us: 10}
      - {name: "w{i}", kind: synchronize, ranks: [0], host_us: 3}
      - {name: "g{i}", kind: compute, duration_us: 10}
""")
    prog = api.lower_spec(api.load(f), f)
    tags = {prog.op_id(i): dict(prog.tagsets[int(prog.tags_id[i])]) for i in range(prog.N)}
    want = {"host_wait_before_us": 0.0, "host_wait_after_us": 3.0, "host_wait_scope": "device"}
    assert tags["g0@r0"] == want and tags["g1@r0"] == want
    assert tags["g0@r1"] == {} and tags["f1@r0"] == {}


#: a synchronize inside one host call: between two ops of one CUDA graph segment (a graph is one launch; CUDA
#: refuses a synchronize while its stream captures) or of one p2p_batch (one batch_isend_irecv call)
INSIDE = {
    "graph": """schema_version: 1
name: g
world_size: 1
ops:
  - {name: a, kind: compute, duration_us: 100, graph: G}
  - {name: s, kind: synchronize}
  - {name: b, kind: compute, duration_us: 10, graph: G}
""",
    "batch": """schema_version: 1
name: b
world_size: 2
ops:
  - {name: x, kind: compute, duration_us: 100}
  - {name: sd, kind: send, peer: (rank + 1) % 2, bytes: 1024, p2p_batch: B}
  - {name: s, kind: synchronize}
  - {name: rv, kind: recv, peer: (rank + 1) % 2, bytes: 1024, p2p_batch: B}
""",
}


@pytest.mark.parametrize("case", sorted(INSIDE))
def test_check_refuses_a_synchronize_inside_one_call(tmp_path: Path, case: str) -> None:
    """Before: the graph case ran (the host 'waited' between two nodes of one graph launch), the batch case
    reported a deadlock of sd waiting for rv (the wait tag sat on rv, the batch's second op)."""
    f = tmp_path / "bad.yaml"
    f.write_text(INSIDE[case])
    r = CliRunner().invoke(app, ["check", str(f)])
    assert r.exit_code == 2, r.output
    assert "inside" in r.output and "fix:" in r.output and "Traceback" not in r.output, r.output
    assert f"bad.yaml:{6 if case == 'graph' else 7}" in r.output, r.output  # the synchronize's line
    with pytest.raises(GraphError):
        api.lower_spec(api.load(f), f)
