"""SCHEDSIM_PIN_CPUS (issue 39, host variance): which CPUs the executor, calibrate and the hand-written
references pin their host threads to, read from a fake sysfs tree."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from executor import ExecError
from executor.dist import gpu_local_cpus, parse_cpulist, pin_process, pinned_cpus


def _sysfs(root: Path, bus: str, local: str | None, node: int | None, node_cpus: str = "") -> str:
    dev = root / "bus" / "pci" / "devices" / bus
    dev.mkdir(parents=True)
    if local is not None:
        (dev / "local_cpulist").write_text(local + "\n")
    if node is not None:
        (dev / "numa_node").write_text(f"{node}\n")
        if node >= 0:
            nd = root / "devices" / "system" / "node" / f"node{node}"
            nd.mkdir(parents=True)
            (nd / "cpulist").write_text(node_cpus + "\n")
    return str(root)


def test_parse_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []
    assert parse_cpulist("5") == [5]


def test_gpu_local_cpus_reads_local_cpulist_then_numa_node(tmp_path: Path) -> None:
    root = _sysfs(tmp_path / "a", "0000:3b:00.0", "16-31", 1, "99")
    assert gpu_local_cpus("0000:3B:00.0", root) == list(range(16, 32))
    root = _sysfs(tmp_path / "b", "0000:3b:00.0", None, 1, "8-11,24-27")
    assert gpu_local_cpus("0000:3b:00.0", root) == [8, 9, 10, 11, 24, 25, 26, 27]
    root = _sysfs(tmp_path / "c", "0000:3b:00.0", None, -1)  # one node (a VM): unknown
    assert gpu_local_cpus("0000:3b:00.0", root) is None
    assert gpu_local_cpus("0000:99:00.0", root) is None


def test_pinned_cpus_specs() -> None:
    local = list(range(16, 32))
    avail = list(range(64))
    assert pinned_cpus(None, local, avail) is None
    assert pinned_cpus("off", local, avail) is None
    assert pinned_cpus("numa", local, avail) == local
    assert pinned_cpus("numa:4", local, avail, local_rank=0) == [16, 17, 18, 19]
    assert pinned_cpus("numa:4", local, avail, local_rank=2) == [24, 25, 26, 27]
    assert pinned_cpus("numa:4", local, avail, local_rank=5) == [20, 21, 22, 23]  # 4 blocks: wraps round
    assert pinned_cpus("numa:4", None, [0, 1, 2, 3, 4, 5]) == [0, 1, 2, 3]  # local unknown: the available CPUs
    assert pinned_cpus("numa", local, [0, 1, 17, 18]) == [17, 18]  # only CPUs this process may use
    assert pinned_cpus("2-3,7", local, avail) == [2, 3, 7]


@pytest.mark.parametrize("spec", ["numa:0", "numa:x", "two", "70-71"])
def test_pinned_cpus_rejects(spec: str) -> None:
    with pytest.raises(ExecError) as e:
        pinned_cpus(spec, [0, 1], list(range(8)))
    assert "SCHEDSIM_PIN_CPUS" in str(e.value) and "fix:" in str(e.value)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_pin_process_sets_the_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    before = os.sched_getaffinity(0)
    one = min(before)
    monkeypatch.setenv("SCHEDSIM_PIN_CPUS", str(one))
    try:
        assert pin_process(0, None) == [one]
        assert os.sched_getaffinity(0) == {one}
    finally:
        os.sched_setaffinity(0, before)
    monkeypatch.delenv("SCHEDSIM_PIN_CPUS")
    assert pin_process(0, None) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs")
def test_the_issuing_thread_runs_alone_on_the_last_cpu_inside_the_block_and_shares_them_after(monkeypatch):
    """SCHEDSIM_PIN_ISSUER=1: inside issuer_alone() the calling thread is on the last of the process's CPUs and a
    helper thread started before on the others; after the block both are back on all of them. Unset: nothing
    changes. A value other than 0 or 1 is refused, naming the variable and the fix. A thread that had CPUs of its own
    (as NCCL's threads get their GPU's NUMA node's, init.cc) keeps them, less the issuer's, and has them back after
    the block, not all of the process's."""
    import threading

    from executor.dist import issuer_alone, pin_issuer

    cpus = sorted(os.sched_getaffinity(0))
    stop = threading.Event()
    tid: list[int] = []

    def helper(narrow: bool) -> None:
        if narrow:
            os.sched_setaffinity(0, cpus[:1])
        tid.append(threading.get_native_id())
        stop.wait(30)

    threads = []
    for narrow in (False, True):
        threads.append(threading.Thread(target=helper, args=(narrow,), daemon=True))
        threads[-1].start()
        while len(tid) < len(threads):
            time.sleep(0.001)
    try:
        monkeypatch.delenv("SCHEDSIM_PIN_ISSUER", raising=False)
        with issuer_alone() as cpu:
            assert cpu is None and sorted(os.sched_getaffinity(0)) == cpus
        monkeypatch.setenv("SCHEDSIM_PIN_ISSUER", "1")
        assert pin_issuer()
        with issuer_alone() as cpu:
            assert cpu == cpus[-1]
            assert sorted(os.sched_getaffinity(0)) == [cpus[-1]]
            assert sorted(os.sched_getaffinity(tid[0])) == cpus[:-1]
            assert sorted(os.sched_getaffinity(tid[1])) == cpus[:1]
        assert sorted(os.sched_getaffinity(0)) == cpus and sorted(os.sched_getaffinity(tid[0])) == cpus
        assert sorted(os.sched_getaffinity(tid[1])) == cpus[:1]
        monkeypatch.setenv("SCHEDSIM_PIN_ISSUER", "yes")
        with pytest.raises(ExecError, match="SCHEDSIM_PIN_ISSUER='yes' is neither 0 nor 1"):
            pin_issuer()
    finally:
        stop.set()
        for t in threads:
            t.join(5)
