"""Rule host-issue's warm-up of a rank's first collective calls (``launch.collective_warmup_us``,
:func:`schedsim.gpu.host.collective_after_call_extra`): which calls pay it (each rank's k-th collective call of the
iteration, not one captured in a graph launch, none in ``cuda_graph`` mode or on a rank without collectives), what
it moves in a prediction (hand-computed makespans of the host-bound tp_allreduce_graph), and profiles whose list is
not one of finite numbers ≥ 0 refused with exit 2, naming the field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from schedsim import api
from schedsim.cli import app
from schedsim.gpu.host import H_COLL, H_GRAPH, H_KERNEL, H_P2P, collective_after_call_extra
from schedsim.hardware.profile import HardwareProfile, load_profile

ROOT = Path(__file__).resolve().parents[2]
TP = ROOT / "schedules" / "tp_allreduce_graph.yaml"  # 8 layers of linear + all_reduce per rank, host-bound eagerly
P = load_profile("h200")


def _with(warm: list[float], after: float | None = None) -> HardwareProfile:
    return P.model_copy(update={"launch": P.launch.model_copy(update={"collective_warmup_us": warm,
                                                                      "collective_after_kernel_us": after})})


def _extra(rank: list[int], hcls: list[int], graph: list[int] | None, warm: list[float], mode: str = "eager"
           ) -> list[float] | None:
    ex = collective_after_call_extra(np.array(rank), np.array(hcls), None if graph is None else np.array(graph),
                                     _with(warm), mode)
    return None if ex is None else (ex * 1e6).round(9).tolist()


def test_each_ranks_kth_collective_call_pays_the_kth_value_ranks_interleaved() -> None:
    # ranks interleaved (program order within each rank): rank 1's calls are its own 1st, 2nd, 3rd; the list is
    # longer than rank 0's two calls; a kernel and a send between them count for nothing
    got = _extra([1, 0, 1, 0, 1, 0, 1], [H_COLL, H_KERNEL, H_COLL, H_COLL, H_P2P, H_COLL, H_COLL], None,
                 [9.0, 2.0, 0.5, 7.0])
    assert got == [9.0, 0.0, 2.0, 9.0, 0.0, 2.0, 0.5]


def test_a_collective_captured_in_a_graph_launch_pays_nothing_and_is_not_counted() -> None:
    # ops 0-1 one graph launch (its all_reduce calls nothing); the first eager all_reduce after it is the rank's
    # first collective call: 9.0; in cuda_graph mode no call at all
    hcls = [H_KERNEL, H_COLL, H_KERNEL, H_COLL, H_KERNEL, H_COLL]
    assert _extra([0] * 6, hcls, [0, 0, -1, -1, -1, -1], [9.0, 2.0, 0.5]) == [0.0, 0.0, 0.0, 9.0, 0.0, 2.0]
    assert _extra([0] * 6, hcls, [0, 0, -1, -1, -1, -1], [9.0], "cuda_graph") is None
    # a graph launch's own op (H_GRAPH) is no collective call either
    assert _extra([0, 0], [H_GRAPH, H_COLL], None, [4.0]) == [0.0, 4.0]


def test_ranks_without_collectives_and_empty_or_zero_lists_pay_nothing() -> None:
    assert _extra([0, 0, 1, 1], [H_KERNEL, H_P2P, H_KERNEL, H_P2P], None, [9.0, 2.0]) == [0.0] * 4
    assert _extra([0, 0], [H_KERNEL, H_COLL], None, []) is None  # nothing set: the steady rule only (unset here)
    assert _extra([0, 0], [H_KERNEL, H_COLL], None, [0.0, 0.0]) is None


def _makespan_us(profile: HardwareProfile, launch: str = "eager") -> float:
    return api.predict(TP, profile=profile, launch=launch).timeline.makespan_s * 1e6


def test_the_warm_up_moves_the_host_bound_layers_by_its_values() -> None:
    """tp_allreduce_graph eagerly: each rank's host issues linear, all_reduce, ... back to back and the GPU waits
    for it, so each warm-up value before the last collective adds to the makespan one to one. The last (8th) call's
    extra is host time after its own kernel's launch (rule host-issue spends a call's extra there,
    :func:`schedsim.gpu.host.kernel_release`), so it moves nothing: a list of ten values adds its first seven."""
    base = _makespan_us(P)
    assert _makespan_us(_with([12.0, 4.0])) - base == pytest.approx(16.0, abs=1e-6)
    assert _makespan_us(_with([float(v) for v in range(1, 11)])) - base == pytest.approx(28.0, abs=1e-6)  # 1+..+7
    assert _makespan_us(_with([0.0] * 7 + [50.0])) == pytest.approx(base, abs=1e-6)
    # on top of the steady after-kernel rule, and nothing in cuda_graph mode
    after = P.launch.eager_per_collective_us + 2.0
    assert _makespan_us(_with([12.0, 4.0], after)) - _makespan_us(_with([], after)) == pytest.approx(16.0, abs=1e-6)
    assert _makespan_us(_with([12.0, 4.0]), "cuda_graph") == _makespan_us(P, "cuda_graph")


@pytest.mark.parametrize(("value", "needle"), [
    ([-1.0], "launch.collective_warmup_us.0: Input should be greater than or equal to 0"),
    ([1.0, float("nan")], "launch.collective_warmup_us.1: Input should be a finite number"),
    ([float("inf")], "launch.collective_warmup_us.0: Input should be a finite number"),
    (12.0, "launch.collective_warmup_us: Input should be a valid list"),
    (None, "launch.collective_warmup_us: Input should be a valid list"),
    (["abc"], "launch.collective_warmup_us.0: Input should be a valid number"),
    ([True], "launch.collective_warmup_us: Value error, a number, not a boolean"),
])
def test_a_profile_whose_warm_up_list_is_bad_is_refused(tmp_path: Path, value: object, needle: str) -> None:
    d = yaml.safe_load((ROOT / "schedsim" / "hardware" / "profiles" / "h200.yaml").read_text())
    d["launch"]["collective_warmup_us"] = value
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(d))
    r = CliRunner().invoke(app, ["predict", str(TP), "-p", str(f), "-o", str(tmp_path / "o"), "--no-gantt"])
    assert r.exit_code == 2, r.output
    assert needle in r.output and str(f) in r.output and "Traceback" not in r.output, r.output
