"""``schedsim search`` (issue 36): candidates refused with Megatron's reasons or over the memory limit, the
Pareto front, and the command's ranking, files and independence from --jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.search import SearchPoint, candidates, pareto
from schedsim.spec.loader import load_text
from tests.spec.test_training_block import TINY


def _block():  # type: ignore[no-untyped-def]
    t = load_text(TINY).training
    assert t is not None
    return t


def test_candidates_refused_and_derived() -> None:
    """tp ∈ {1, 2, 3} × pp ∈ {1, 2} on 8 GPUs: tp 3 is refused with Megatron's reason; dp = 8 / (tp · pp)."""
    pts = candidates(_block(), 8, tps=[1, 2, 3], pps=[1, 2], mbss=[1], recomputes=["none"], vpps=[None],
                     memory_limit=2**40)
    assert [(p.setting["tp"], p.setting["pp"], p.setting["dp"], p.status) for p in pts] == [
        (1, 1, 8, "simulated"), (1, 2, 4, "simulated"), (2, 1, 4, "simulated"), (2, 2, 2, "simulated"),
        (3, 1, 0, "refused"), (3, 2, 0, "refused")]
    assert pts[4].reason.startswith("tensor_model_parallel_size: world_size (8) is not divisible by tp (3)")
    assert pts[1].block["pipeline_model_parallel_size"] == 2 and "data_parallel_size" not in pts[1].block
    tight = candidates(_block(), 8, tps=[2], pps=[2], mbss=[1], recomputes=["none", "full"], vpps=[None],
                       memory_limit=1.0)
    assert [p.status for p in tight] == ["over memory", "over memory"]
    assert tight[1].block["recompute_granularity"] == "full" and tight[1].block["recompute_method"] == "uniform"
    assert tight[1].memory_bytes < tight[0].memory_bytes  # full recomputation stores less


def test_over_memory_reason_tells_the_two_sides_apart() -> None:
    """A limit just under the need printed "x.x GiB > x.x GiB" with the same digits on both sides."""
    need = candidates(_block(), 8, tps=[2], pps=[2], mbss=[1], recomputes=["none"], vpps=[None],
                      memory_limit=2**60)[0].memory_bytes
    for below in (2**20, 1):  # 1 MiB (GiB to 3-4 decimals), 1 byte (the bytes)
        pt = candidates(_block(), 8, tps=[2], pps=[2], mbss=[1], recomputes=["none"], vpps=[None],
                        memory_limit=need - below)[0]
        lhs, rhs = pt.reason.split(" > ")
        assert pt.status == "over memory" and lhs != rhs, pt.reason


def test_pareto_front_by_hand() -> None:
    """(time, memory): (1, 5) (2, 3) (3, 4) (4, 1): the third is beaten by the second on both."""
    pts = [SearchPoint({}, {}, memory_bytes=m, iteration_s=t) for t, m in ((3, 4), (1, 5), (4, 1), (2, 3))]
    pareto(pts)
    assert [(p.iteration_s, p.pareto) for p in pts] == [(3, False), (1, True), (4, True), (2, True)]


def test_pareto_front_keeps_every_copy_of_a_tied_point() -> None:
    """(time, memory): two configurations as fast and as light as each other (recompute none and selective with
    use_flash_attn store and run the same) are both on the front, since neither beats the other; one as fast and
    heavier, or as light and slower, is beaten."""
    pts = [SearchPoint({}, {}, memory_bytes=m, iteration_s=t) for t, m in ((1, 5), (1, 5), (1, 6), (2, 5), (2, 3))]
    pareto(pts)
    assert [p.pareto for p in pts] == [True, True, False, False, True]


def test_search_command_ranks_and_writes(tmp_path: Path) -> None:
    """The command ranks the simulated configurations by iteration time, marks the front, writes search.json
    and search.png, and gives the same rows with 2 worker processes as with 1."""
    p = tmp_path / "s.yaml"
    p.write_text(TINY)
    args = ["search", str(p), "--tp", "1,2,3", "--pp", "1,2", "--micro-batch-size", "1", "--recompute",
            "none,selective", "--format", "json"]
    r1 = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert r1.exit_code == 0, r1.stderr[-2000:]
    rows = json.loads(r1.stdout)
    ran = [x for x in rows if x["status"] == "simulated"]
    assert len(rows) == 12 and len(ran) == 8
    assert [x["iteration_s"] for x in ran] == sorted(x["iteration_s"] for x in ran)
    assert ran[0]["pareto"] and all(x["reason"] for x in rows if x["status"] != "simulated")
    assert (tmp_path / "a" / "search.json").exists() and (tmp_path / "a" / "search.png").exists()
    r2 = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b"), "--jobs", "2"])
    assert r2.exit_code == 0, r2.stderr[-2000:]
    assert json.loads(r2.stdout) == rows


def test_search_needs_a_training_block(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("schema_version: 1\nname: x\nworld_size: 1\nops:\n  - {name: a, kind: compute, duration_us: 1}\n")
    r = CliRunner().invoke(app, ["search", str(p), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "search needs a training: block" in r.stderr and "fix:" in r.stderr


def test_configurations_past_max_ops_are_counted_apart_and_axes_deduplicated(tmp_path: Path) -> None:
    """--max-ops 3000 with --full-ranks: tp 4 (about 3,712 and 3,832 ops by the loader's estimate, an upper bound
    within 12% of the real count: tests/spec/test_training_op_estimate.py) is past the limit,
    which is this tool's, not Megatron's refusal; --tp 1,1,2,4 tries tp 1 once. Lowered for their representative
    ranks (the default) the tp 4 points write 1/8 of those ops (one rank of tp 4 × dp 2, pp 1; pp 2: 2 of 8)
    and all six run."""
    p = tmp_path / "s.yaml"
    p.write_text(TINY)
    args = ["search", str(p), "--tp", "1,1,2,4", "--pp", "1,2", "--micro-batch-size", "1,1", "--recompute",
            "none,none", "--max-ops", "3000"]
    sym = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "s")])
    assert sym.exit_code == 0, sym.stderr[-2000:]
    assert "6 configurations: 6 simulated" in sym.stdout, sym.stdout[-800:]
    r = CliRunner().invoke(app, [*args, "--full-ranks", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.stderr[-2000:]
    assert "6 configurations: 4 simulated, 0 refused by Megatron's rules, 0 over the memory limit, 2 past " \
        "--max-ops" in r.stdout, r.stdout[-800:]
    rows = json.loads((tmp_path / "o" / "search.json").read_text())
    big = [x for x in rows if x["status"] == "over max-ops"]
    assert [x["setting"]["tp"] for x in big] == [4, 4]
    assert big[0]["reason"] == "about 3,736 op instances, past the limit of 3,000 (--max-ops)"


def test_context_and_expert_parallel_axes() -> None:
    """--cp and --ep: on the MoE block (8 GPUs, tp 2, 4 experts) cp ∈ {1, 2} × ep ∈ {1, 2, 3}: dp = 8 / (2·cp);
    ep 3 is refused (dp·cp = 4 is not a multiple of 3: Megatron's expert-parallel group sizes)."""
    from tests.lower.test_training_moe import MOE

    t = load_text(MOE).training
    assert t is not None
    pts = candidates(t, 8, tps=[2], pps=[1], mbss=[1], recomputes=["none"], vpps=[None], memory_limit=2**40,
                     cps=[1, 2], eps=[1, 2, 3])
    assert [(p.setting["cp"], p.setting["ep"], p.setting["dp"], p.status) for p in pts] == [
        (1, 1, 4, "simulated"), (1, 2, 4, "simulated"), (1, 3, 4, "refused"),
        (2, 1, 2, "simulated"), (2, 2, 2, "simulated"), (2, 3, 2, "refused")]
    assert pts[2].reason.startswith("expert_model_parallel_size: world_size (8) is not divisible by")
    assert pts[4].block["context_parallel_size"] == 2 and pts[4].block["expert_model_parallel_size"] == 2


def test_search_times_a_point_with_the_schedules_env(tmp_path: Path) -> None:
    """A schedule's ``env`` (NCCL_ALGO / NCCL_PROTO here) holds for every configuration search simulates, as it
    does for predict: the row of the schedule's own configuration has predict's iteration time (search wrote
    only the training block, so NCCL chose its algorithms: 11.03 against predict's 11.34 ms on this block)."""
    from schedsim.api import predict
    from schedsim.hardware.profile import load_profile
    from schedsim.report.training import training_report

    text = TINY.replace("world_size: 8\n", "world_size: 32\nenv: {NCCL_ALGO: Ring, NCCL_PROTO: Simple}\n").replace(
        "hidden_size: 64", "hidden_size: 1024").replace("seq_length: 32", "seq_length: 512").replace(
        "global_batch_size: 8", "global_batch_size: 32").replace("tp: 2", "tp: 4")
    run = predict(load_text(text), "dgx_h100")
    want = training_report(load_text(text), run.timeline, load_profile("dgx_h100")).iteration_s
    p = tmp_path / "s.yaml"
    p.write_text(text)
    r = CliRunner().invoke(app, ["search", str(p), "-p", "dgx_h100", "--tp", "4", "--pp", "2", "--cp", "1",
                                 "--micro-batch-size", "1", "--recompute", "none", "--format", "json", "--out",
                                 str(tmp_path / "o")])
    assert r.exit_code == 0, r.stderr[-2000:]
    (row,) = [x for x in json.loads(r.stdout) if x["status"] == "simulated"]
    assert row["iteration_s"] == want


def test_search_says_hand_written_ops_beside_the_block_are_in_no_point(tmp_path: Path) -> None:
    # each point is the training: block alone; the schedule's own ops were dropped without a word
    text = TINY + "ops:\n  - {name: extra, kind: compute, duration_us: 5, ranks: [0]}\n"
    p = tmp_path / "s.yaml"
    p.write_text(text)
    args = ["search", str(p), "-p", "dgx_h100", "--tp", "2", "--pp", "2", "--cp", "1", "--micro-batch-size", "1",
            "--recompute", "none", "--format", "json", "--out", str(tmp_path / "o")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.stderr[-2000:]
    assert ("warning: " + str(p) + ": search times the training: block alone; the schedule's 1 hand-written op "
            "instance(s) beside it are in no search point (predict times them)") in r.stderr.splitlines()
    p.write_text(TINY)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and "hand-written" not in r.stderr


def test_points_share_the_profile_and_its_cost_model_with_the_same_predictions() -> None:
    """The points of a search run on one profile object and one CostModel (its NCCL costs and GEMM surfaces
    worked out once), and each point's prediction is the one it gets alone in a fresh process state."""
    from schedsim import search as s

    pts = [p for p in candidates(_block(), 8, tps=[1, 2], pps=[2], mbss=[1], recomputes=["none"], vpps=[None],
                                 memory_limit=2**40) if p.status == "simulated"]
    assert len(pts) == 2
    alone = []
    for p in pts:
        s._PROFILES.clear()
        s._MODELS.clear()
        alone.append(s.run_point("tiny", 8, p.block, "dgx_h100"))
    s._PROFILES.clear()
    s._MODELS.clear()
    first = s.run_point("tiny", 8, pts[0].block, "dgx_h100")
    (model,) = s._MODELS.values()
    together = [first, s.run_point("tiny", 8, pts[1].block, "dgx_h100")]
    assert list(s._MODELS.values()) == [model]  # the second point took the first one's CostModel
    assert together == alone and isinstance(alone[0], dict) and alone[0]["iteration_s"] > 0


def test_each_configuration_of_a_search_is_predicted_as_predict_predicts_it_alone(tmp_path: Path) -> None:
    """A sample of a 32-GPU search on dgx_h100 (4 nodes: data-parallel and pipeline transfers across nodes on
    shared NICs; tp, pp, cp, virtual stages and recomputation varied; one worker process, so the points share
    the profile, its CostModel and the stage templates): every simulated row's iteration time, TFLOP/s per GPU
    and MFU equal to the last bit to what ``predict`` of that configuration alone reports (its training block as
    the schedule), and the cyclic collector paused while a point runs."""
    import gc

    from schedsim import lower as lower_mod
    from schedsim.api import predict
    from schedsim.hardware.profile import load_profile
    from schedsim.report.training import training_report

    text = TINY.replace("world_size: 8\n", "world_size: 32\n").replace("hidden_size: 64", "hidden_size: 1024").replace(
        "seq_length: 32", "seq_length: 512").replace("global_batch_size: 8", "global_batch_size: 32").replace(
        "num_layers: 2", "num_layers: 4")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    gc_on: list[bool] = []
    real_lower = lower_mod.lower

    def lower(*a: object, **k: object) -> object:
        gc_on.append(gc.isenabled())
        return real_lower(*a, **k)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lower_mod, "lower", lower)
        r = CliRunner().invoke(app, ["search", str(p), "-p", "dgx_h100", "--tp", "2,4", "--pp", "2,4", "--cp", "1,2",
                                     "--micro-batch-size", "1", "--recompute", "none,full", "--vpp-layers", "1",
                                     "--format", "json", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.stderr[-2000:]
    rows = [x for x in json.loads(r.stdout) if x["status"] == "simulated"]
    assert len(rows) >= 12 and gc_on and not any(gc_on)
    for row in rows[::3]:  # a third of them, fastest first
        pts = candidates(load_text(text).training, 32, tps=[row["setting"]["tp"]], pps=[row["setting"]["pp"]],
                         cps=[row["setting"]["cp"]], mbss=[1], recomputes=[row["setting"]["recompute"]],
                         vpps=[row["setting"]["vpp_layers"]], memory_limit=2**40)
        spec = load_text(json.dumps({"schema_version": 1, "name": "tiny", "world_size": 32, "training": pts[0].block}))
        alone = training_report(spec, predict(spec, "dgx_h100").timeline, load_profile("dgx_h100"))
        assert [row["iteration_s"], row["tflops_per_gpu"], row["mfu"]] == [
            alone.iteration_s, alone.tflops_per_gpu, alone.mfu], row["setting"]


def test_workers_take_the_largest_points_first_and_results_keep_their_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """With worker processes, points are handed out largest first (the loader's op estimate: tp 1 writes more ops
    than tp 2, pp 1 more than pp 2 for its representatives), and each result lands on its own point, as one
    process gives them."""
    import concurrent.futures

    from schedsim import search as s
    from schedsim.spec.limits import _training_ops

    pts = [p for p in candidates(_block(), 8, tps=[2, 1], pps=[2, 1], mbss=[1], recomputes=["none"], vpps=[None],
                                 memory_limit=2**40) if p.status == "simulated"]
    sent: list[tuple[int, int]] = []

    class Inline:  # a pool that runs each point as it is submitted, in this process
        def __init__(self, max_workers: int) -> None:
            pass

        def __enter__(self) -> Inline:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def submit(self, fn: object, *args: object) -> concurrent.futures.Future:
            block = args[2]
            assert isinstance(block, dict)
            sent.append((block["tensor_model_parallel_size"], block["pipeline_model_parallel_size"]))
            f: concurrent.futures.Future = concurrent.futures.Future()
            f.set_result(s.run_point(*args))  # type: ignore[arg-type]
            return f

    one = [(p.setting["tp"], p.setting["pp"], p.iteration_s) for p in s.search("tiny", 8, [*pts], "dgx_h100", 1)]
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Inline)
    for p in pts:
        p.iteration_s = 0.0
    two = [(p.setting["tp"], p.setting["pp"], p.iteration_s) for p in s.search("tiny", 8, pts, "dgx_h100", 2)]
    ops = {(p.setting["tp"], p.setting["pp"]): _training_ops(p.block, 8, False) for p in pts}
    assert sent == sorted(ops, key=lambda k: -ops[k]) and len(set(ops.values())) == 4
    assert two == one and all(t > 0 for _tp, _pp, t in one)


def test_kept_layout_answers_are_those_worked_out_afresh() -> None:
    """``layout_alike`` is kept per profile and plan shape within a search (``schedsim.search._layout_alike``):
    on profiles whose nodes hold 8, 3 and 6 GPUs (groups that a node boundary cuts unlike their representatives'
    on the last two), for tp, pp and cp and
    ``tp_comm_overlap`` varied, each kept answer, read after every other point filled the store, equals the one
    worked out with the store empty; the answers differ across the points (the key separates them)."""
    from schedsim import search as s
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.symmetry import layout_alike

    h100 = load_profile("dgx_h100")
    profs = [h100, *(h100.model_copy(update={"topology": h100.topology.model_copy(update={"gpus_per_node": n})})
                     for n in (3, 6))]
    text = TINY.replace("world_size: 8\n", "world_size: 16\n").replace("global_batch_size: 8",
                                                                        "global_batch_size: 16")
    block = load_text(text).training
    pts = [p for sp in (False, True) for p in candidates(
        block.model_copy(update={"sequence_parallel": sp, "tp_comm_overlap": sp}), 16, tps=[1, 2, 4],
        pps=[1, 2, 4], cps=[1, 2], mbss=[1], recomputes=["none"], vpps=[None], memory_limit=2**40)
        if p.status == "simulated"]
    specs = [load_text(json.dumps({"schema_version": 1, "name": "t", "world_size": 16, "training": p.block}))
             for p in pts]
    s._LAYOUTS.clear()
    answers = set()
    for prof in profs:
        fresh = [layout_alike(prof, sp) for sp in specs]
        kept = [s._layout_alike(prof, sp, layout_alike) for sp in specs]
        again = [s._layout_alike(prof, sp, layout_alike) for sp in reversed(specs)][::-1]
        assert kept == fresh == again
        answers |= set(fresh)
    assert answers == {True, False} and len(pts) > 20
    s._LAYOUTS.clear()


def test_a_points_schedule_text_is_the_python_emitters() -> None:
    """A point's schedule text (``_point``: libyaml's emitter where PyYAML has it) is ``yaml.safe_dump``'s, byte for
    byte, for every candidate of a grid over every axis (the block's values: numbers, strings, booleans), with and
    without an env."""
    import yaml

    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML without libyaml: _point uses safe_dump itself")
    pts = candidates(_block(), 16, tps=[1, 2], pps=[1, 2], mbss=[1, 2], recomputes=["none", "selective", "full"],
                     vpps=[None, 1], memory_limit=2**40, cps=[1, 2], eps=[1, 2])
    assert len(pts) > 100
    for p in pts:
        for env in ({}, {"CUDA_DEVICE_MAX_CONNECTIONS": 1, "NCCL_ALGO": "Ring"}):
            doc = {"schema_version": 1, "name": "s", "world_size": 16, **({"env": env} if env else {}),
                   "training": p.block}
            assert yaml.dump(doc, Dumper=yaml.CSafeDumper, sort_keys=False) == yaml.safe_dump(doc, sort_keys=False)


def test_search_table_says_when_mfu_has_no_peak(capsys: pytest.CaptureFixture[str]) -> None:
    """A point simulated on a profile without its dtype's peak has a rate (TFLOP/s) and no MFU: the table said
    "0.0 %"; a point with a peak keeps its figure."""
    from schedsim.cli import _print_search

    setting = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "dp": 8, "micro_batch_size": 1, "vpp_layers": None,
               "recompute": "none"}
    pts = [SearchPoint(dict(setting), {}, memory_bytes=2**30, iteration_s=1e-3, tflops_per_gpu=12.5, mfu=0.0),
           SearchPoint(dict(setting, tp=2), {}, memory_bytes=2**30, iteration_s=2e-3, tflops_per_gpu=6.0, mfu=0.25)]
    _print_search(pts, 10)
    rows = [line for line in capsys.readouterr().out.splitlines() if "12.5" in line or "6.0" in line]
    assert len(rows) == 2 and "– (no peak)" in rows[0] and "0.0 %" not in rows[0] and "25.0 %" in rows[1]
