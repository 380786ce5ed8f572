"""Tier figures fitted to nccl-tests logs (schedsim.network.fit, ``calibrate --from-nccl-tests``): a log the
model itself wrote from known figures gives those figures back; a published log is fitted closer than NCCL's
constants time it, without changing what NCCL chooses."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml

from schedsim.hardware.profile import HardwareProfile, load_profile
from schedsim.network import NcclNetwork
from schedsim.network.fit import fit_profile
from schedsim.network.links import bus_factor
from schedsim.network.nccl_tests import NcclTestsLog, parse_nccl_tests, read_nccl_tests

ROOT = Path(__file__).resolve().parents[2]
LOG_309 = ROOT / "tests/data/nccl_tests_309_h100_2x8_ib.log"


def synth(profile: HardwareProfile, kind: str, nodes: int, gpn: int, sizes: list[int]) -> str:
    """An nccl-tests log (as all_reduce_perf prints it) of ``kind`` over ``nodes`` x ``gpn`` ranks, timed by
    ``profile``'s NCCL model: the time of the choice NCCL runs (``floor=False``), as a real log reads."""
    net = NcclNetwork(profile)
    g = profile.topology.gpus_per_node
    ranks = tuple(n * g + i for n in range(nodes) for i in range(gpn))
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
             "validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on {f'host{r // gpn}':>10} device {r % gpn:2d} "
              f"[0x{r:02x}] NVIDIA H100 80GB HBM3" for r in range(len(ranks))]
    lines += ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  "
              "(GB/s)  (GB/s)"]
    f = bus_factor(kind, len(ranks))
    for s in sizes:
        got = net.collective(kind, s, ranks, floor=False)
        assert got is not None
        t = got.seconds * 1e6
        alg = s / t / 1e3
        cells = f"{t:.2f} {alg:.2f} {alg * f:.2f} 0"
        lines.append(f"{s} {s // 4} float sum -1 {cells} {cells}")
    return "\n".join(lines + ["# Out of bounds values : 0 OK"]) + "\n"


def fig(h: float | None, b: float | None) -> dict[str, Any]:
    return {"hw_latency_us": h, "bw_factor": b, "provenance": "assumed", "source": "the truth of this test"}


def test_a_log_written_from_known_figures_fits_back_to_them():
    base = load_profile("dgx_h100")
    d = base.model_dump()
    d["topology"]["scale_up"]["timing"] = {"ring/LL": fig(0.9, None), "nvls/Simple": fig(7.5, 1.05)}
    d["topology"]["nics"]["timing"] = {"tree/LL": fig(7.0, 0.8), "nvls_tree/Simple": fig(16.0, 0.9),
                                       "tree/LL128": fig(11.0, 1.2)}
    truth = HardwareProfile.model_validate(d)
    sizes = [2 ** k for k in range(3, 35)]
    logs = [parse_nccl_tests(synth(truth, "all_reduce", nodes, 8, sizes), collective="all_reduce")
            for nodes in (1, 2)]
    assert [(x.nranks, x.nodes) for x in logs] == [(8, 1), (16, 2)]
    fitted, figs, notes = fit_profile(base, logs, "synthetic")
    got = {(f.tier, f.key): (f.hw_latency_us, f.bw_factor) for f in figs}
    # every (algo, proto) NCCL runs at some size, and no other; ring/LL's bandwidth was NCCL's own (factor 1)
    assert set(got) == {("scale_up", "ring/LL"), ("scale_up", "nvls/Simple"), ("nics", "tree/LL"),
                        ("nics", "tree/LL128"), ("nics", "nvls_tree/Simple")}
    want = {("scale_up", "ring/LL"): (0.9, 1.0), ("scale_up", "nvls/Simple"): (7.5, 1.05),
            ("nics", "tree/LL"): (7.0, 0.8), ("nics", "tree/LL128"): (11.0, 1.2),
            ("nics", "nvls_tree/Simple"): (16.0, 0.9)}
    for k, (h, b) in want.items():
        assert got[k][0] == pytest.approx(h, abs=0.02), k  # the log prints times to 0.01 us
        assert got[k][1] == pytest.approx(b, rel=2e-3), k
    assert notes == []
    assert fitted.topology.scale_up is not None and fitted.topology.scale_up.timing["ring/LL"].provenance == "fitted"


def test_a_row_is_timed_at_the_channel_step_a_prediction_takes():
    """Forced tree/LL128 all_reduce over 2 x 8: a prediction times 8-16 KiB at the next channel step (faster
    there); the fit timed those rows at their own size, so a log written from known figures fitted back to an rms
    error of 0.074 % and a latency of 10.975 µs instead of 11, and no longer agreed with predict at 12288 B."""
    base = load_profile("dgx_h100")
    d = base.model_dump()
    d["nccl"]["algo"], d["nccl"]["proto"] = "tree", "LL128"
    base = HardwareProfile.model_validate(d)
    d["topology"]["nics"]["timing"] = {"tree/LL128": fig(11.0, 1.2)}
    truth = HardwareProfile.model_validate(d)
    sizes = sorted([2 ** k for k in range(10, 31)] + [3 * 2 ** k for k in range(10, 16)])
    log = parse_nccl_tests(synth(truth, "all_reduce", 2, 8, sizes), collective="all_reduce")
    _, figs, notes = fit_profile(base, [log], "synthetic")
    (f,) = figs
    assert (f.tier, f.key, notes) == ("nics", "tree/LL128", [])
    assert f.hw_latency_us == pytest.approx(11.0, abs=2e-3) and f.bw_factor == pytest.approx(1.2, rel=1e-5)
    assert f.rms_pct < 0.01  # the log's 0.01 µs rounding


def test_latency_bound_rows_fit_the_latency_alone():
    """Rows whose bandwidth term is a sliver of their time do not fit a bandwidth (module doc: "sizes all
    latency-bound"): an 8 B and a 16 B all_reduce over 4 H200s, 20.0 and 21.0 us, fitted ring/LL's factor to
    0.002 (the 1 us between them taken for bandwidth), a 64 KiB all_reduce 36.7 us for 22.3. Now h alone: the least
    squares of relative error of h x c_h over (t - c0 - c_b), with NCCL's own factor."""
    from schedsim.network.fit import BANDWIDTH_SHARE_MIN, _observations

    text = "\n".join(["# nThread 1 nGpus 4", "#  size count type redop root time algbw busbw #wrong time algbw busbw "
                      "#wrong", "8 2 float sum -1 20.00 0.00 0.00 0 20.00 0.00 0.00 0",
                      "16 4 float sum -1 21.00 0.00 0.00 0 21.00 0.00 0.00 0"]) + "\n"
    log = parse_nccl_tests(text, collective="all_reduce")
    base = load_profile("h200")
    (obs,) = _observations(base, [log], "scale_up")[0].values()
    assert max(o.cb / o.t for o in obs) < BANDWIDTH_SHARE_MIN
    _fitted, figs, _ = fit_profile(base, [log], "synthetic")
    (f,) = figs
    assert (f.key, f.bw_factor) == ("ring/LL", None)
    w = [1 / o.t for o in obs]  # h = sum(x y) / sum(x x), x = c_h / t, y = (t - c0 - c_b) / t
    h = (sum(o.ch * wi * (o.t - o.c0 - o.cb) * wi for o, wi in zip(obs, w, strict=True))
         / sum((o.ch * wi) ** 2 for o, wi in zip(obs, w, strict=True)))
    assert f.hw_latency_us == pytest.approx(h, rel=1e-12)
    assert 20.0 < f.hw_latency_us * obs[0].ch + obs[0].c0 + obs[0].cb < 21.0  # the fitted time lies between


def _rms(profile: HardwareProfile, log: NcclTestsLog) -> tuple[float, list[str]]:
    net = NcclNetwork(profile)
    ranks = tuple(range(16))
    errs, choice = [], []
    for r in log.rows:
        got = net.collective("all_reduce", r.size_bytes, ranks)
        assert got is not None
        t = r.time_us
        errs.append((got.seconds * 1e6 - t) / t)
        choice.append(f"{got.algo}/{got.proto}")
    return 100 * math.sqrt(sum(e * e for e in errs) / len(errs)), choice


def test_a_published_two_node_log_fits_the_nics_tier():
    # NVIDIA/nccl-tests#309: 16 H100 over 2 nodes, 8x 400G IB, NCCL 2.26.2, 8 B .. 16 GiB
    (log,) = read_nccl_tests(LOG_309, collective="all_reduce")
    assert (log.nranks, log.nodes, len(log.rows)) == (16, 2, 32)
    base = load_profile("dgx_h100")
    before, choice_before = _rms(base, log)
    fitted, figs, _ = fit_profile(base, [log], "nccl-tests#309")
    after, choice_after = _rms(fitted, log)
    assert choice_after == choice_before  # NCCL chooses with its own constants, fitted or not
    assert {(f.tier, f.key) for f in figs} == {("nics", "tree/LL"), ("nics", "tree/LL128"),
                                               ("nics", "nvls_tree/Simple")}
    # NCCL's constants (with NVLS-tree's pipeline fill) time the log's 32 rows at 8.41 % rms error; the fitted
    # figures at 7.14 %
    assert before == pytest.approx(8.41, abs=0.01)
    assert after == pytest.approx(7.14, abs=0.01)


def test_calibrate_writes_the_fitted_figures_with_their_provenance(tmp_path: Path):
    from typer.testing import CliRunner

    from schedsim.cli import app

    out = tmp_path / "fit.yaml"
    res = CliRunner().invoke(app, ["calibrate", "--from-nccl-tests", str(LOG_309), "--collective", "all_reduce",
                                   "--base", "dgx_h100", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "nvls_tree/Simple" in res.output
    nics = yaml.safe_load(out.read_text())["topology"]["nics"]
    assert set(nics["timing"]) == {"tree/LL", "tree/LL128", "nvls_tree/Simple"}
    for v in nics["timing"].values():
        assert v["provenance"] == "fitted" and "nccl_tests_309_h100_2x8_ib.log" in v["source"]
    nics_p = load_profile(str(out)).topology.nics
    assert nics_p is not None and nics_p.provenance == "published"  # the tier's own figures keep theirs



def test_a_base_without_a_cluster_topology_says_nothing_was_fitted(tmp_path: Path):
    """--base pcie2 (no topology.scale_up): the busbw table is written, and a note says no tier figure was fitted
    (it said nothing, as if the fit had run)."""
    from typer.testing import CliRunner

    from schedsim.cli import app

    out = tmp_path / "fit.yaml"
    res = CliRunner().invoke(app, ["calibrate", "--from-nccl-tests", str(LOG_309), "--collective", "all_reduce",
                                   "--base", "pcie2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "note: no tier figures fitted: the base profile has no topology.scale_up" in res.output
    assert "fitted tier figures" not in res.output
    assert "all_reduce" in yaml.safe_load(out.read_text())["collectives"]["tables"]

def test_a_fitted_tier_is_no_longer_named_unmeasured():
    from schedsim import api
    from schedsim.notes import guesses
    from tests.network.test_nccl_model_limits import AR16

    prog = api.lower_spec(api.load_text(AR16))
    (log,) = read_nccl_tests(LOG_309, collective="all_reduce")
    base = load_profile("dgx_h100")
    fitted, _, _ = fit_profile(base, [log], "nccl-tests#309")

    def nccl_note(p: HardwareProfile) -> str:
        (n,) = [x for x in guesses(prog, p) if x.kind == "collective-nccl-model"]
        return str(n)

    # dgx_h100: both tiers published; after the fit only the scale-up tier (no one-node log) is unmeasured
    assert "topology.scale_up, topology.nics" in nccl_note(base)
    note = nccl_note(fitted)
    assert "topology.scale_up" in note and "topology.nics" not in note


def test_figures_fitted_on_two_nodes_carry_to_four_and_eight():
    # held out: the same thread's 4-node (qoofyk) and 8-node (gj-aion) H100 / 8x 400G IB runs, out-of-place
    # times at the sizes benchmarks/accuracy/network_published.py takes (NVIDIA/nccl-tests#309)
    held = [(4, 16, 34.82), (4, 1 << 10, 39.79), (4, 1 << 20, 82.17), (4, 16 << 20, 259.6), (4, 1 << 30, 5808.8),
            (4, 16 << 30, 90986.0), (8, 1 << 20, 117.0), (8, 16 << 20, 378.1), (8, 1 << 30, 7370.5),
            (8, 8 << 30, 52733.0)]
    (log,) = read_nccl_tests(LOG_309, collective="all_reduce")
    base = load_profile("dgx_h100")
    fitted, figs, _ = fit_profile(base, [log], "nccl-tests#309")

    def errs(p: HardwareProfile) -> list[float]:
        net = NcclNetwork(p)
        out = []
        for nodes, size, t in held:
            got = net.collective("all_reduce", size, tuple(range(8 * nodes)))
            assert got is not None
            out.append(abs(got.seconds * 1e6 - t) / t * 100)
        return sorted(out)

    # the bandwidth is fitted as a factor on NCCL's own (NVLS-tree .985): a GB/s fitted on 2 nodes, where NCCL
    # doubles NVLS-tree's network share, would put these 4- and 8-node rows 20-35 % too fast. With the pipeline
    # fill timed, the network step fits at 17.5 us (NCCL 2.30.7: 20.9; 26.85 without the fill)
    (nvls,) = [f for f in figs if f.key == "nvls_tree/Simple"]
    assert nvls.bw_factor == pytest.approx(0.985, abs=0.001)
    assert nvls.hw_latency_us == pytest.approx(17.52, abs=0.01)
    e0, e1 = errs(base), errs(fitted)
    assert (statistics.median(e0), e0[-1]) == (pytest.approx(5.92, abs=0.05), pytest.approx(17.4, abs=0.05))
    assert (statistics.median(e1), e1[-1]) == (pytest.approx(6.42, abs=0.05), pytest.approx(16.5, abs=0.05))


def test_a_transport_latency_written_into_a_log_fits_back_beside_nccls_own_step():
    """A 2 x 8 log timed with 40 us per network crossing (topology.nics.transport_latency_us, which NCCL does not
    see): ``transport=True`` fits 40 back on its rows up to 4 KiB (tree/LL: 2 crossings, up and down), and the
    NICs' tree/LL step is then fitted at NCCL's own 5.0 us; without it that step takes them in: 5 + 40 us."""
    base = load_profile("dgx_h100")
    d = base.model_dump()
    d["topology"]["nics"]["transport_latency_us"] = 40.0
    truth = HardwareProfile.model_validate(d)
    sizes = [2 ** k for k in range(3, 25)]
    logs = [parse_nccl_tests(synth(truth, "all_reduce", 2, 8, sizes), collective="all_reduce")]
    fitted, figs, notes = fit_profile(base, logs, "synthetic", transport=True)
    assert fitted.topology.nics is not None
    assert fitted.topology.nics.transport_latency_us == pytest.approx(40.0, abs=0.02)  # printed to 0.01 us
    assert any(n.startswith("topology.nics.transport_latency_us fitted: 40.0") for n in notes), notes
    got = {f.key: f.hw_latency_us for f in figs if f.tier == "nics"}
    assert got["tree/LL"] == pytest.approx(5.0, abs=0.02)
    plain, figs0, _ = fit_profile(base, logs, "synthetic")
    assert plain.topology.nics is not None and plain.topology.nics.transport_latency_us == 0.0
    assert {f.key: f.hw_latency_us for f in figs0}["tree/LL"] == pytest.approx(5.0 + 40.0, abs=0.05)


def test_calibrate_transport_latency_writes_it_and_needs_logs(tmp_path: Path):
    from typer.testing import CliRunner

    from schedsim.cli import app

    out = tmp_path / "fit.yaml"
    res = CliRunner().invoke(app, ["calibrate", "--from-nccl-tests", str(LOG_309), "--collective", "all_reduce",
                                   "--base", "dgx_h100", "--transport-latency", "--out", str(out)])
    assert res.exit_code == 0, res.output
    nics = yaml.safe_load(out.read_text())["topology"]["nics"]
    # NVIDIA/nccl-tests#309's 2-node InfiniBand log: NCCL's figures hold it, a fraction of a microsecond is left
    assert 0.0 <= nics["transport_latency_us"] < 1.0
    assert "transport_latency_us fitted by schedsim calibrate --from-nccl-tests --transport-latency" in nics["source"]
    res = CliRunner().invoke(app, ["calibrate", "--transport-latency", "--out", str(tmp_path / "x.yaml")])
    assert res.exit_code == 2
    assert "--transport-latency fits a figure to nccl-tests logs" in res.output


def sweep_rows(profile: HardwareProfile, kind: str, ranks: tuple[int, ...], sizes: list[int]) -> list[dict[str, Any]]:
    """``schedsim calibrate``'s sweep rows (executor/calibrate_comm.py) of ``kind`` over ``ranks``, timed by
    ``profile``'s NCCL model (the time of NCCL's choice, ``floor=False``), unrounded."""
    net = NcclNetwork(profile)
    rows = []
    for s in sizes:
        got = net.collective(kind, s, ranks, floor=False)
        assert got is not None
        t = got.seconds * 1e6
        rows.append({"size": s, "count": s // 4, "type": "float", "redop": "sum", "root": -1, "time_us": t,
                     "algbw": s / t / 1e3, "busbw": s / t / 1e3 * bus_factor(kind, len(ranks)), "wrong": 0})
    return rows


def test_a_calibrate_sweep_from_known_figures_fits_back_to_them():
    # calibrate's own sweep on one 8-GPU node, converted (logs_from_sweep) to the fitter's input, gives back the
    # scale-up figures it was generated from
    from schedsim.network.fit import logs_from_sweep

    base = load_profile("dgx_h100")
    d = base.model_dump()
    d["topology"]["scale_up"]["timing"] = {"ring/LL": fig(0.9, 0.95), "nvls/Simple": fig(7.5, 1.05),
                                           "ring/LL128": fig(2.5, 0.85), "ring/Simple": fig(4.0, 0.9)}
    truth = HardwareProfile.model_validate(d)
    ranks = tuple(range(8))
    sizes = [2 ** k for k in range(10, 34)]
    sweep = {k: sweep_rows(truth, k, ranks, sizes) for k in ("all_reduce", "all_gather", "reduce_scatter")}
    sweep["p2p_unbatched"] = sweep["all_reduce"]  # a lone isend / irecv: no nccl-tests test, left out
    logs = logs_from_sweep(sweep, 8, "calibrate sweep", nccl_version="2.27.3")
    assert [(x.collective, x.nranks, x.nodes, x.nccl_version) for x in logs] == [
        (k, 8, 1, "2.27.3") for k in ("all_reduce", "all_gather", "reduce_scatter")]
    fitted, figs, notes = fit_profile(base.model_copy(update={"nccl": base.nccl.model_copy(
        update={"version": "2.30.7"})}), logs, "sweep")
    got = {f.key: (f.hw_latency_us, f.bw_factor) for f in figs}
    assert {f.tier for f in figs} == {"scale_up"}
    for k, v in d["topology"]["scale_up"]["timing"].items():
        if k in got:
            assert got[k][0] == pytest.approx(v["hw_latency_us"], abs=1e-6), k
            assert got[k][1] == pytest.approx(v["bw_factor"], rel=1e-6), k
    assert {"ring/LL", "nvls/Simple"} <= set(got)
    up = fitted.topology.scale_up
    assert up is not None and all(up.timing[k].provenance == "fitted" and up.timing[k].source.startswith("sweep")
                                  for k in got)
    assert notes == ["the logs ran NCCL 2.27.3, the base profile states nccl.version 2.30.7: fitted with NCCL "
                     "2.30.7's tuning constants; remove nccl.version from the base to fit with the logs' release"]
