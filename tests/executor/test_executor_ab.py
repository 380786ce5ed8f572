"""``benchmarks/accuracy/handwritten/harness.py ab`` on CPU ranks (gloo): one process holds ``schedsim execute``'s
uninstrumented loop and a hand-written reference's, and times them in alternating blocks; the summary is the
medians of what the blocks hold (checked here by recomputing it from the written blocks), on one rank and on two."""

from __future__ import annotations

import json
import statistics

import pytest
from exec_helpers import ROOT, torchrun

AB = ROOT / "benchmarks" / "accuracy" / "handwritten" / "harness.py"


@pytest.mark.parametrize("nproc", [1, 2])
def test_both_loops_in_one_process_alternate_blocks_and_their_ratio_is_the_medians(tmp_path, nproc):
    out = tmp_path / "ab.json"
    (tmp_path / "ab.tmp").write_text("the user's own file")  # beside --out: not schedsim's to write or move
    sets = [] if nproc == 2 else ["--set", "world_size=1"]
    r = torchrun(nproc, ["ab", "schedules/tp_allreduce_graph.yaml", "tp_allreduce.py", *sets,
                         "--set", "layers=3", "--eager", "--blocks", "3", "--iters", "4", "--warmup", "1",
                         "--out", str(out)], script=AB)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(out.read_text())
    assert (d["world_size"], d["launch"], d["reference"], len(d["blocks"])) == (nproc, "eager", "tp_allreduce.py", 3)
    assert all(len(b["executor"]) == 4 and len(b["reference"]) == 4 for b in d["blocks"])
    assert all(x > 0 for b in d["blocks"] for side in b.values() for x in side)
    ex = [statistics.median(b["executor"]) for b in d["blocks"]]
    ref = [statistics.median(b["reference"]) for b in d["blocks"]]
    assert d["executor_s"] == pytest.approx(statistics.median(ex))
    assert d["reference_s"] == pytest.approx(statistics.median(ref))
    assert d["executor_vs_ref"] == pytest.approx(statistics.median(ex) / statistics.median(ref) - 1)
    assert d["pairs"] == pytest.approx([e / f - 1 for e, f in zip(ex, ref, strict=True)])
    assert "executor vs hand-written" in r.stdout
    assert (tmp_path / "ab.tmp").read_text() == "the user's own file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ab.json", "ab.tmp"]  # no temporary file left


def test_a_graph_schedule_on_cpu_ranks_is_refused_with_the_fix(tmp_path):
    r = torchrun(1, ["ab", "schedules/tp_allreduce_graph.yaml", "tp_allreduce.py", "--set", "world_size=1",
                     "--out", str(tmp_path / "ab.json")], script=AB)
    assert r.returncode != 0 and "fix: pass --eager on CPU" in r.stderr
    assert not (tmp_path / "ab.json").exists()
