"""``schedsim search --dask`` (issue 36): a search's configurations simulated on a Dask cluster give the rows a
local search gives; the errors a user meets there (Dask missing, no scheduler, another schedsim on a worker)
exit 2 with the fix; a worker's caches serve one search."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from tests.spec.test_training_block import TINY

distributed = pytest.importorskip("distributed")

ARGS = ["--tp", "1,2,3", "--pp", "1,2", "--micro-batch-size", "1", "--recompute", "none,full", "--format", "json"]


def _search(tmp_path: Path, tag: str, *extra: str) -> Any:
    p = tmp_path / "s.yaml"
    p.write_text(TINY)
    r = CliRunner().invoke(app, ["search", str(p), *ARGS, "--out", str(tmp_path / tag), *extra])
    return r


def test_a_search_on_a_dask_scheduler_and_on_a_local_cluster_gives_the_rows_of_one_process(tmp_path: Path) -> None:
    """12 configurations (tp 3 refused): the 8 simulated ones' iteration time, TFLOP/s and MFU, the order and the
    Pareto marks equal to the last bit whether the points run in this process, on a scheduler given by address
    (a cluster of two worker processes started here, as `dask scheduler` / `dask worker` would be) or on
    ``--dask local``."""
    one = _search(tmp_path, "one")
    assert one.exit_code == 0, one.stderr[-2000:]
    rows = json.loads(one.stdout)
    assert len(rows) == 12 and sum(r["status"] == "simulated" for r in rows) == 8
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        far = _search(tmp_path, "far", "--dask", c.scheduler_address)
    assert far.exit_code == 0, far.stderr[-2000:]
    assert json.loads(far.stdout) == rows
    assert json.loads((tmp_path / "far" / "search.json").read_text()) == rows
    here = _search(tmp_path, "here", "--dask", "local", "-j", "2")
    assert here.exit_code == 0, here.stderr[-2000:]
    assert json.loads(here.stdout) == rows


def test_no_scheduler_at_the_address_is_exit_2_with_the_fix(tmp_path: Path) -> None:
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        r = _search(tmp_path, "x", "--dask", "tcp://127.0.0.1:1")
    assert r.exit_code == 2
    assert "--dask tcp://127.0.0.1:1: cannot reach a Dask scheduler there" in r.stderr
    assert "fix: give the scheduler's address" in r.stderr and "Traceback" not in r.stderr


def test_dask_not_installed_is_exit_2_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    r = _search(tmp_path, "x", "--dask", "local")
    assert r.exit_code == 2
    assert "--dask needs Dask's distributed scheduler" in r.stderr and "schedsim[cluster]" in r.stderr


def test_a_worker_with_another_schedsim_version_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers are asked their version first (here threads of this process, whose answer is changed)."""
    from schedsim import search_cluster

    monkeypatch.setattr(search_cluster, "_version", lambda: "0.0.0-other")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as c:
        r = _search(tmp_path, "x", "--dask", c.scheduler_address)
    assert r.exit_code == 2
    assert "runs schedsim 0.0.0-other, this process" in r.stderr
    assert "fix: install this schedsim version on every worker" in r.stderr


def test_a_workers_caches_serve_one_search_only() -> None:
    """A task of a new search empties the process's profile and cost-model caches: a worker that outlives a
    search does not price the next one's points with the earlier search's profile."""
    from schedsim import search as s
    from schedsim.hardware.profile import load_profile
    from schedsim.search import candidates
    from schedsim.spec.loader import load_text

    block = load_text(TINY).training
    assert block is not None
    pt = next(p for p in candidates(block, 8, tps=[2], pps=[2], mbss=[1], recomputes=["none"], vpps=[None],
                                    memory_limit=2**40) if p.status == "simulated")
    a, b = load_profile("dgx_h100"), load_profile("dgx_a100")
    fast = s.worker_point("search-1", a, "tiny", 8, pt.block, False, None)
    assert isinstance(fast, dict) and [p for p, _ in s._PROFILES.values()] == [a]
    again = s.worker_point("search-1", a, "tiny", 8, pt.block, False, None)
    assert again == fast
    slow = s.worker_point("search-2", b, "tiny", 8, pt.block, False, None)
    assert isinstance(slow, dict) and [p for p, _ in s._PROFILES.values()] == [b]
    s._PROFILES.clear()
    s._MODELS.clear()
    alone = s.run_point("tiny", 8, pt.block, "dgx_a100")  # that profile in a fresh process state
    s._PROFILES.clear()
    s._MODELS.clear()
    assert slow == alone and slow != fast


def test_ten_thousand_configurations_without_a_cluster_get_the_hint(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from schedsim import search as s

    many = [s.SearchPoint({"tp": 1}, {}) for _ in range(10_000)]
    monkeypatch.setattr(s, "candidates", lambda *a, **k: many)
    monkeypatch.setattr(s, "search", lambda name, world, points, *a, **k: [])
    monkeypatch.setattr(s, "write_plot", lambda *a, **k: None)
    r = _search(tmp_path, "x")
    assert r.exit_code == 0, r.stderr[-2000:]
    assert "10,000 configurations to simulate on this machine; a cluster runs them faster: --dask" in r.stderr
