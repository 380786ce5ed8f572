"""The aligned start shared by the executor and the hand-written references (executor/clock.py)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from executor.clock import IterationClock, aligned_start_ns

torch = pytest.importorskip("torch")


def test_aligned_start_is_the_latest_clock_plus_the_margin() -> None:
    assert aligned_start_ns([5_000, 9_000, 7_000], 1e-6) == 10_000
    assert aligned_start_ns([0], 0.0) == 0


def _clock_with_peer(peer_offset_ns: int, margin_s: float) -> IterationClock:
    """A 2-rank CPU clock whose all-gather reports the peer's clock ``peer_offset_ns`` after ours."""
    c = IterationClock(torch.device("cpu"), 2, margin_s=margin_s)

    def all_gather(out, mine, group=None):  # type: ignore[no-untyped-def]
        out[0].copy_(mine)
        out[1].fill_(int(mine[0]) + peer_offset_ns)

    c.dist = SimpleNamespace(all_gather=all_gather)
    return c


class _FakeTime:
    """A wall clock that moves ``tick_ns`` on every read (and by ``jump`` when told), so the spin is timed
    exactly and no scheduler stall on a loaded machine can move a rank past its start."""

    def __init__(self, start_ns: int = 10**18, tick_ns: int = 250_000) -> None:
        self.ns, self.tick = start_ns, tick_ns
        self.reads: list[int] = []

    def time_ns(self) -> int:
        t = self.ns
        self.reads.append(t)
        self.ns += self.tick
        return t

    def jump(self, ns: int) -> None:
        self.ns += ns


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> _FakeTime:
    import executor.clock as clockmod

    ft = _FakeTime()
    monkeypatch.setattr(clockmod, "time", SimpleNamespace(time_ns=ft.time_ns))
    return ft


def test_start_waits_for_the_latest_rank_plus_the_margin(fake_time: _FakeTime) -> None:
    c = _clock_with_peer(3_000_000, 0.001)  # the peer read its clock 3 ms after us
    anchor = c.start()
    mine = fake_time.reads[0]               # our clock read, the one all-gathered
    target = mine + 3_000_000 + 1_000_000   # the peer's read + the 1 ms margin
    # it spun until the agreed instant and left at the first read at or past it (one 0.25 ms tick of slack)
    assert target <= anchor <= target + fake_time.tick and c.late_starts == 0
    assert all(t < target for t in fake_time.reads[1:-2])  # every read before the last two was early


def test_start_waits_in_real_time_at_least_until_the_agreed_instant() -> None:
    """The same with the real clock: only the lower bound is asserted, since a stall of the test process
    (a loaded machine) can only make the start later, and a late start is counted, not waited for."""
    c = _clock_with_peer(3_000_000, 0.001)
    t0 = time.time_ns()
    anchor = c.start()
    assert anchor - t0 >= 4_000_000 and c.late_starts <= 1


def test_a_rank_past_the_agreed_instant_starts_at_once_and_is_counted_late(fake_time: _FakeTime) -> None:
    c = _clock_with_peer(0, 0.001)
    gather = c.dist.all_gather

    def slow_gather(out, mine, group=None):  # type: ignore[no-untyped-def]
        gather(out, mine)
        fake_time.jump(10_000_000)  # the all-gather returned 10 ms after our read: the agreed instant (1 ms) has passed

    c.dist = SimpleNamespace(all_gather=slow_gather)
    anchor = c.start()
    assert c.late_starts == 1
    # our read, the check, the spin loop's first test (already past), the anchor: no spin
    assert len(fake_time.reads) == 4 and anchor == fake_time.reads[0] + 10_000_000 + 3 * fake_time.tick


def test_a_start_far_ahead_unsynchronised_clocks_is_capped_and_counted(fake_time: _FakeTime) -> None:
    c = _clock_with_peer(10_000_000_000, 0.001)  # the peer's clock reads 10 s ahead of ours
    anchor = c.start()
    check = fake_time.reads[1]
    cap = check + 1_000_000 + 50_000_000  # spun at most margin + 50 ms past the check, not 10 s
    assert cap <= anchor <= cap + fake_time.tick
    assert c.late_starts == 1


class _Ev:
    """An event that completes after ``n`` queries."""

    def __init__(self, n: int) -> None:
        self.n = n

    def query(self) -> bool:
        self.n -= 1
        return self.n < 0


def test_wait_events_spins_until_every_event_completed_or_the_deadline(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``spin`` polls without ever sleeping; ``sleep`` sleeps 20 µs, doubling, between polls (the sleeps are
    recorded, not timed); a deadline returns the events still pending."""
    import executor.clock as clock
    from executor.clock import wait_events

    sleeps: list[float] = []
    monkeypatch.setattr(clock.time, "sleep", sleeps.append)
    evs = [_Ev(3), _Ev(50)]
    assert wait_events(evs, how="spin") == [] and evs[1].n < 0
    assert sleeps == []  # 50 polls without sleeping
    never = _Ev(10**9)
    assert wait_events([_Ev(0), never], deadline_ns=time.perf_counter_ns() + 2_000_000, how="spin") == [never]
    assert sleeps == []
    slept = _Ev(3)
    assert wait_events([slept], how="sleep") == [] and sleeps == [20e-6, 40e-6, 80e-6]


def test_the_host_row_covers_start_to_after_the_wait_and_names_the_cpus() -> None:
    """A CPU clock: start(), a 20 ms sleep (the thread blocks: a voluntary switch, no run time), host_row(): a
    row of HOST_FIELDS whose wall covers the sleep, whose run time does not, with at least one voluntary switch,
    on CPUs this process may use."""
    import os

    from executor.clock import HOST_FIELDS, host_columns

    c = IterationClock(torch.device("cpu"), 1)
    with pytest.raises(RuntimeError, match="before start"):
        c.host_row()
    c.start()
    time.sleep(0.02)
    row = c.host_row()
    got = dict(zip(HOST_FIELDS, row, strict=True))
    assert got["wall_s"] >= 0.02 and got["run_s"] < got["wall_s"] - 0.01
    allowed = os.sched_getaffinity(0)
    assert got["cpu_start"] in allowed and got["cpu_end"] in allowed
    if got["vcsw"] is not None:
        assert got["vcsw"] >= 1 and got["ivcsw"] >= 0
    assert host_columns([row, row])["wall_s"] == [round(got["wall_s"], 7)] * 2


@pytest.mark.parametrize("schedstat, stat", [
    (b"12345\n", b"1 (python) R 0 0"),  # fewer fields than the kernel's
    (b"abc def 1\n", b"1 (py) thon) R " + b"x " * 40),  # not numbers; a ")" in the name, field 39 not a number
    (b"", b""),  # empty
])
def test_the_host_probe_reads_a_procfs_laid_out_otherwise_as_fields_the_system_lacks(tmp_path, schedstat, stat):
    """A schedstat or stat file whose layout differs from Linux's (another kernel, a sandbox's procfs) gives None
    fields, as a missing file does (run time from time.thread_time), and never an exception: the probe runs inside
    every timed iteration of execute."""
    from executor.clock import HOST_FIELDS, HostThreadProbe

    p = HostThreadProbe()
    p.close()
    fds = []
    for name, text in (("schedstat", schedstat), ("stat", stat)):
        (tmp_path / name).write_bytes(text)
        fds.append(os.open(tmp_path / name, os.O_RDONLY))
    p._fds = fds
    try:
        a = p.read()
        time.sleep(0.002)
        row = dict(zip(HOST_FIELDS, p.delta(a, p.read()), strict=True))
    finally:
        for fd in fds:
            os.close(fd)
    assert row["runq_s"] is None and row["cpu_start"] is None and row["cpu_end"] is None
    assert row["wall_s"] >= 0.002 and 0 <= row["run_s"] < row["wall_s"]


def test_the_host_probe_run_time_of_a_busy_thread_is_its_cpu_time_not_a_tick_stale_sum() -> None:
    """The calling thread spins 0.3 ms, 60 times: each row's run time is at most its wall time (one thread cannot
    run longer than the wall), and every row ran some: the thread executes the spin and both reads inside its row,
    whatever else the machine runs (a share of the wall, as the first form asserted, fails on a 2-core VM at load
    10). Linux's schedstat field 1 of a running thread is its sum as of the last scheduler tick or switch, so rows
    read from it are 0 (a row inside one tick: most rows of 0.3 ms) or a whole tick (4 ms at HZ=250), longer than
    the row's wall; ``time.thread_time`` (CLOCK_THREAD_CPUTIME_ID) is brought up to date.
    The row's wall runs from ``a``'s clock before its run read to ``b``'s clock after its own: with one wall
    read before each run read, an interrupt charged to the thread between ``b``'s two reads made about 1 row in
    1,000 run up to 16 µs longer than its wall on a loaded 2-core VM."""
    from executor.clock import HOST_FIELDS, HostThreadProbe

    p = HostThreadProbe()
    rows = []
    for _ in range(60):
        a = p.read()
        t = time.perf_counter_ns() + 300_000
        while time.perf_counter_ns() < t:
            pass
        rows.append(dict(zip(HOST_FIELDS, p.delta(a, p.read()), strict=True)))
    p.close()
    assert all(0 <= r["run_s"] <= r["wall_s"] + 2e-6 for r in rows)
    assert all(r["run_s"] > 0 for r in rows)
