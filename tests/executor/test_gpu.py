"""The executor's CUDA paths on real GPUs (issue 9 §4): eager, CUDA graph, profiler, p2p on 2 ranks.

Marked ``gpu`` and skipped without CUDA (2-rank tests without 2 GPUs). Run on a GPU machine with
``python -m pytest -q -m gpu tests/executor/test_gpu.py`` (``benchmarks/accuracy/two_gpu_suite.sh`` does).
"""

from __future__ import annotations

import time

import pytest
from exec_helpers import DATA, torchrun

from schedsim.sim.timeline import Timeline

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
FAST = ["--iters", "5", "--warmup", "2", "--timeout", "60", "--no-gantt"]


def _meta(out):  # type: ignore[no-untyped-def]
    return Timeline.read_json(out / "timeline.json").meta


def test_eager_one_gpu_times_every_op_and_the_lean_loop(tmp_path) -> None:
    out = tmp_path / "eager"
    r = torchrun(1, ["execute", "schedules/small_ops_graph.yaml", "--eager", "--set", "layers=8", "--out", str(out),
                     *FAST], cuda=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    m = _meta(out)
    assert m["timing"] == "cuda_events" and m["device"] == "cuda"
    assert 0 < m["makespan_uninstrumented_s"] <= m["makespan_median_s"] * 1.5


@two_gpus
def test_cuda_graph_with_captured_nccl_exits_within_seconds_of_its_last_write(tmp_path) -> None:
    out = tmp_path / "graph"
    r = torchrun(2, ["execute", "schedules/tp_allreduce_graph.yaml", "--cuda-graph", "--out", str(out), *FAST],
                 cuda=True, timeout=180)
    t_exit = time.time()
    assert r.returncode == 0, r.stderr[-3000:]
    last = max(p.stat().st_mtime for p in out.rglob("*") if p.is_file())
    assert t_exit - last < 20.0  # the hang of issue 9 §4 lasted until the ranks were killed (130 s)
    assert _meta(out)["timing"].startswith("cuda_graph")


def test_profiler_maps_kernels_to_ops(tmp_path) -> None:
    out = tmp_path / "prof"
    r = torchrun(1, ["execute", "schedules/offload.yaml", "--eager", "--set", "rows=256", "--profiler",
                     "--out", str(out), *FAST], cuda=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "kineto_rank0.json.gz").stat().st_size > 0
    # read through the timeline reader (the JSON layout is its business: "ops" since the streaming writer)
    kt = Timeline.read_json(out / "timeline_kernels.json")
    by_name = {s.name: s for s in kt.spans}
    assert set(by_name) >= {"mm0", "h2d0", "d2h0"}
    assert all(by_name[n].end_s > by_name[n].start_s for n in ("mm0", "h2d0", "d2h0"))


@two_gpus
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])  # Megatron's _communicate batches; torch pipelining's
def test_batched_p2p_pipeline_two_gpus(tmp_path, schedule) -> None:  # one batch_isend_irecv per p2p action
    out = tmp_path / schedule
    r = torchrun(2, ["execute", "schedules/pipeline_schedules.yaml", "--set", "p=2", "--set", "m=4", "--set",
                     f"schedule={schedule}", "--set", "tokens=512", "--set", "hidden=512", "--out", str(out), *FAST],
                 cuda=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    m = _meta(out)
    p2p = {k: v for k, v in m["materialised"].items() if k.startswith(("send", "recv"))}
    assert p2p and all("batch_isend_irecv" in v for v in p2p.values()), p2p
    assert m["makespan_uninstrumented_s"] > 0


@two_gpus
def test_lone_isend_irecv_two_gpus(tmp_path) -> None:
    out = tmp_path / "lone"
    r = torchrun(2, ["execute", str(DATA / "p2p_lone.yaml"), "--out", str(out), *FAST], cuda=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    m = _meta(out)
    notes = m["materialised"]  # rank 0's ops: f0, s01, r10
    assert notes["s01"].startswith("NCCL send") and notes["r10"].startswith("NCCL recv"), notes
    assert m["makespan_uninstrumented_s"] > 0
