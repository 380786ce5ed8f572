"""check and predict print one line per kind of warning, with a count, and a prediction that rests on a guess says
so once (issue 33)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from schedsim import api
from schedsim.hardware.profile import load_profile
from schedsim.notes import Note, guesses, kind_of, summarize
from tests.cli.test_cli import run

MISORDERED = """\
schema_version: 1
name: w
world_size: 2
ops:
  - {name: x0, kind: send, peer: 1, bytes: 4096, stream: a, ranks: [0]}
  - {name: x1, kind: send, peer: 1, bytes: 4096, stream: a, ranks: [0]}
  - {name: x2, kind: send, peer: 1, bytes: 4096, stream: a, ranks: [0]}
  - {name: x3, kind: send, peer: 1, bytes: 4096, stream: a, ranks: [0]}
  - {name: x3, kind: recv, peer: 0, bytes: 4096, stream: a, ranks: [1]}
  - {name: x2, kind: recv, peer: 0, bytes: 4096, stream: a, ranks: [1]}
  - {name: x1, kind: recv, peer: 0, bytes: 4096, stream: a, ranks: [1]}
  - {name: x0, kind: recv, peer: 0, bytes: 4096, stream: a, ranks: [1]}
"""

BF16_ON_FP32_TABLE = """\
schema_version: 1
name: g
world_size: 1
ops:
  - foreach: {i: range(6)}
    ops:
      - {name: "mm{i}", kind: matmul, m: 1024, n: 1024, k: 1024, dtype: bf16, stream: s}
"""


def test_check_prints_one_line_per_kind_with_its_count(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(MISORDERED)
    r = run("check", str(f))
    assert r.returncode == 0, r.stderr
    starts = [line for line in r.stderr.splitlines() if line.startswith("warning")]
    assert len(starts) == 1  # 4 misordered pairs, one kind: one warning, not four
    assert starts[0].startswith("warning (4 of this kind, the first shown): ") and "NCCL pairs send" in starts[0]


def test_predict_says_once_that_a_gemm_without_table_rows_is_a_roofline_guess(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text(BF16_ON_FP32_TABLE)
    r = run("predict", str(f), "--profile", "rtx3090_pcie1x4", "--out", str(tmp_path / "o"), "--no-gantt")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if "an estimate, not a measurement" in line]
    gemm = [line for line in lines if "matmul" in line]
    assert len(gemm) == 1 and "6 bf16 matmul op(s)" in gemm[0] and "roofline" in gemm[0]
    assert len(lines) == 2 and "ASSUMED" in lines[1]  # each kind once: the roofline, the profile's assumed values


def test_guesses_name_each_kind_once_with_the_ops_it_touches() -> None:
    run_ = api.predict(api.load(Path(__file__).resolve().parents[2] / "schedules" / "tp_ffn.yaml"))
    notes = guesses(run_.program, load_profile("h200"))
    assert [n.kind for n in notes] == ["collective-nccl-model"]  # h200: NCCL's model on PUBLISHED NVLink figures
    assert "4 all_reduce op(s) on 4 ranks" in notes[0] and "topology.scale_up" in notes[0]
    assert run_.timeline.meta["warnings"] == notes  # the timeline carries them (timeline.json, predict's stderr)


def test_kinds_group_by_note_kind_else_by_text_without_particulars() -> None:
    assert kind_of(Note("anything", "k")) == "k"
    assert kind_of("op 'a@r0' waits 3.5 us") == kind_of("op 'b@r7' waits 12 us")
    assert kind_of("op waits") != kind_of("op hangs")
    assert summarize([]) == []  # nothing to say: nothing printed
    many = [f"rank {r}: late by {r} us" for r in range(1000)]
    assert summarize(many) == ["warning (1000 of this kind, the first shown): rank 0: late by 0 us"]


def test_a_profile_with_assumed_values_is_named_once() -> None:
    run_ = api.predict(api.load(Path(__file__).resolve().parents[2] / "schedules" / "allgather_mm8.yaml"), "pcie2")
    notes = [n for n in run_.timeline.meta["warnings"] if getattr(n, "kind", "") == "profile-assumed"]
    assert len(notes) == 1 and "gpu, links.pcie, links.network, memcpy" in notes[0]
    assert not [n for n in run_.timeline.meta["warnings"] if getattr(n, "kind", "") == "collective-alpha-beta"]


def test_assumed_scale_out_figures_are_named_only_when_ranks_span_nodes() -> None:
    """h200's NIC and fabric figures are ASSUMED: a 2-rank schedule on one node uses none of them (no note), the
    same schedule placed on two nodes does (one profile-assumed note naming the NIC section)."""
    prog = api.predict(api.load(Path(__file__).resolve().parents[2] / "schedules" / "tp_ffn.yaml")).program
    prof = load_profile("h200")
    assert "profile-assumed" not in [n.kind for n in guesses(prog, prof)]
    topo = prof.topology.model_copy(update={"placement": [0, 8], "nodes": 2})
    notes = guesses(prog, prof.model_copy(update={"topology": topo}))
    assumed = [n for n in notes if n.kind == "profile-assumed"]
    assert len(assumed) == 1 and "topology.nics" in str(assumed[0])


DP_STAGE = """\
schema_version: 1
name: dp
world_size: 4
pipeline:
  schedule: 1f1b
  p: 2
  m: 2
  data_parallel: 2
  activation_bytes: 1048576
{extra}  stage:
    forward: [{{name: f, kind: compute, duration_us: 10}}]
    backward_input: [{{name: b, kind: compute, duration_us: 10}}]
    backward_weight: [{{name: w, kind: compute, duration_us: 10}}]
"""


def test_a_data_parallel_all_reduce_of_stage_op_lists_without_a_size_says_it_moves_nothing() -> None:
    """A pipeline block of ``stage`` op lists has no parameter count, so its data-parallel gradient all-reduce
    (one per pipeline rank, 2 members each: 4 op instances) moves 0 bytes: said once, with the fix; given
    ``grad_allreduce_bytes`` it moves them and nothing is said."""
    prof = load_profile("h200")
    bare = api.lower_spec(api.load_text(DP_STAGE.format(extra=""), "dp.yaml"))
    (note,) = [n for n in guesses(bare, prof) if n.kind == "comm-zero-bytes"]
    assert note.startswith("4 all_reduce op(s) move 0 bytes") and "grad_allreduce_bytes" in note
    assert "\n  fix: give the size" in note
    sized = api.lower_spec(api.load_text(DP_STAGE.format(extra="  grad_allreduce_bytes: 8388608\n"), "dp.yaml"))
    assert not [n for n in guesses(sized, prof) if n.kind == "comm-zero-bytes"]
    # one replica without activation_bytes: 1F1B with m = 2 on 2 stages sends 2 activations and 2 gradients
    no_act = DP_STAGE.format(extra="").replace("  activation_bytes: 1048576\n", "").replace(
        "data_parallel: 2", "data_parallel: 1").replace("world_size: 4", "world_size: 2")
    pp = api.lower_spec(api.load_text(no_act, "pp.yaml"))
    (note,) = [n for n in guesses(pp, prof) if n.kind == "comm-zero-bytes"]
    assert note.startswith("4 send, 4 recv op(s) move 0 bytes")


def test_one_prediction_builds_one_cost_model_for_the_simulation_and_its_guesses(monkeypatch: Any) -> None:
    """The guesses reuse the simulation's CostModel (its NCCL costs per group are computed once), and the
    model is not kept past the prediction: a second predict builds its own."""
    from schedsim.gpu.cost import CostModel

    built: list[object] = []
    init = CostModel.__init__

    def counting(self: CostModel, profile: Any) -> None:
        built.append(profile)
        init(self, profile)

    monkeypatch.setattr(CostModel, "__init__", counting)
    spec = api.load(Path(__file__).resolve().parents[2] / "schedules" / "tp_ffn.yaml")
    run_ = api.predict(spec)
    assert any(t.kind == "all_reduce" for t in run_.program.templates)  # a collective the NCCL model times
    assert len(built) == 1
    api.predict(spec)
    assert len(built) == 2


NCCL_ENV = """\
schema_version: 1
name: ncclenv
world_size: 2
{env}
ops:
  - {{name: ar, kind: all_reduce, bytes: 67108864, stream: nccl}}
"""


def test_nccl_settings_a_profile_without_the_nccl_model_cannot_read_are_named() -> None:
    # pcie2 times collectives by alpha-beta (no topology.scale_up): NCCL_MAX_CTAS=1 (one channel) and NCCL_ALGO
    # were dropped without a word, the all_reduce as long as without them
    from schedsim.spec.loader import load_text

    def ar_and_warnings(env: str, profile: str) -> tuple[float, list[str]]:
        run_ = api.simulate_spec(load_text(NCCL_ENV.format(env=env), "e.yaml"), load_profile(profile))
        (s,) = [s for s in run_.timeline.spans if s.rank == 0]
        return s.end_s - s.start_s, [str(w) for w in run_.timeline.meta.get("warnings", [])]

    base, said = ar_and_warnings("", "pcie2")
    assert not [w for w in said if "NCCL_" in w]
    got, said = ar_and_warnings("env: {NCCL_ALGO: tree, NCCL_MAX_CTAS: 1}", "pcie2")
    assert got == base  # alpha-beta reads none of them ...
    (w,) = [w for w in said if "NCCL_" in w]  # ... and the output says so, naming the schedule's lines
    assert w.startswith("e.yaml:4: env.NCCL_ALGO and e.yaml:4: env.NCCL_MAX_CTAS: NCCL_ALGO=tree, NCCL_MAX_CTAS=1 "
                        "change nothing: profile 'pcie2' has no topology.scale_up")
    # NCCL_P2P_DISABLE (topology.scale_up.p2p) alike: pcie2's measured links are read, not NCCL's P2P/SHM choice
    got, said = ar_and_warnings("env: {NCCL_P2P_DISABLE: 1}", "pcie2")
    assert got == base
    (w,) = [w for w in said if "NCCL_" in w]
    assert w.startswith("e.yaml:4: env.NCCL_P2P_DISABLE: NCCL_P2P_DISABLE=1 change nothing: profile 'pcie2' has no "
                        "topology.scale_up")
    # a profile's own nccl: fields, named as the profile's
    d = load_profile("pcie2").model_dump()
    d["nccl"]["min_ctas"] = 4
    from schedsim.hardware.profile import HardwareProfile

    run_ = api.simulate_spec(load_text(NCCL_ENV.format(env=""), "e.yaml"), HardwareProfile.model_validate(d))
    assert [str(w) for w in run_.timeline.meta["warnings"] if "NCCL_" in str(w)] == [
        "profile 'pcie2': nccl: NCCL_MIN_CTAS=4 change nothing: profile 'pcie2' has no topology.scale_up, so its "
        "collectives are timed by its busbw tables or alpha-beta, not NCCL's tuning model that reads these settings; "
        "use a profile with topology.scale_up (dgx_h100, h200) to time them"]
    # the profile's field beside the schedule's NCCL_P2P_DISABLE: each named at its own place (the profile's
    # min_ctas is no line of the schedule), and the schedule's NCCL_ALGO beside it names both lines
    run_ = api.simulate_spec(load_text(NCCL_ENV.format(env="env: {NCCL_P2P_DISABLE: 1}"), "e.yaml"),
                             HardwareProfile.model_validate(d))
    (w,) = [str(w) for w in run_.timeline.meta["warnings"] if "NCCL_" in str(w)]
    assert w.startswith("profile 'pcie2': nccl and e.yaml:4: env.NCCL_P2P_DISABLE: NCCL_MIN_CTAS=4, "
                        "NCCL_P2P_DISABLE=1 change nothing"), w
    got, said = ar_and_warnings("env: {NCCL_ALGO: tree, NCCL_P2P_DISABLE: 1}", "pcie2")
    (w,) = [w for w in said if "NCCL_" in w]
    assert w.startswith("e.yaml:4: env.NCCL_ALGO and e.yaml:4: env.NCCL_P2P_DISABLE: NCCL_ALGO=tree, "
                        "NCCL_P2P_DISABLE=1 change nothing"), w
    # the NCCL model reads them: no such warning, and the one channel times the all_reduce longer
    many, said = ar_and_warnings("", "dgx_h100")
    few, said = ar_and_warnings("env: {NCCL_MAX_CTAS: 1}", "dgx_h100")
    assert few > many and not [w for w in said if "change nothing" in w]
