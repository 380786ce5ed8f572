"""benchmarks/accuracy/published_training.py's Zero Bubble rows: the table holds Qi et al. 2024's Tables 3 and 4 as
printed (arXiv 2401.10241, §5.1-5.2), each row's published time is m·b / (samples per GPU per second · GPUs), and
each schedule's settings lower and run (a copy scaled down in width, with the rows' layers, pp and m)."""

from __future__ import annotations

from types import ModuleType

import pytest

from schedsim.api import lower_spec
from schedsim.hardware.profile import load_profile
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text
from tests.conftest import accuracy_script


def _pt() -> ModuleType:
    return accuracy_script("published_training")


def test_the_tables_as_printed() -> None:
    pt = _pt()
    # Table 3: layers, heads, hidden, pipelines (GPUs), microbatch size; microbatch counts
    assert pt.ZB_TABLE3 == {"1.5B": (22, 24, 2304, 8, 6), "6.2B": (30, 32, 4096, 8, 3),
                            "14.6B": (46, 40, 5120, 16, 1), "28.3B": (62, 48, 6144, 32, 1)}
    assert pt.ZB_MICROBATCHES == {"1.5B": (24, 32, 64), "6.2B": (24, 32, 64), "14.6B": (48, 64, 128),
                                  "28.3B": (96, 128, 256)}
    # Table 4, samples per GPU per second: the first and last column of each schedule
    t4 = pt.ZB_TABLE4
    assert [t4[s]["1.5B"][0] for s in ("ZB-2p", "ZB-1p", "1F1B", "1F1B-I")] == [14.5, 12.9, 11.8, 13.1]
    assert [t4[s]["28.3B"][2] for s in ("ZB-2p", "ZB-1p", "1F1B", "1F1B-I")] == [1.00, 0.96, 0.88, 0.90]
    assert t4["1F1B"]["6.2B"] == (3.50, 3.70, 4.03) and t4["ZB-1p"]["14.6B"] == (1.61, 1.67, 1.76)


def test_rows_and_their_published_times() -> None:
    pt = _pt()
    zb = [r for r in pt.ROWS if r[0].startswith("ZB ")]
    assert len(zb) == 36  # 4 models x 3 microbatch counts x (1F1B, 1F1B-I, ZB-1p); ZB-2p is not lowered
    assert not any("ZB-2p" in r[0] for r in zb) and all(r[0].endswith("h.o.") for r in zb)
    row = {r[0]: r for r in zb}
    # 24 microbatches of 6 samples over 8 GPUs at 11.8 samples/GPU/s: 144 / 94.4 s
    assert row["ZB 1.5B m24 1F1B h.o."][4] == pytest.approx(24 * 6 / (11.8 * 8))  # 1.5254 s
    assert row["ZB 28.3B m256 ZB-1p h.o."][4] == pytest.approx(256 / (0.96 * 32))  # 8.333 s
    assert row["ZB 14.6B m64 1F1B-I h.o."][2] == 16
    blk = row["ZB 6.2B m32 1F1B-I h.o."][3]
    assert (blk["num_layers"], blk["pp"], blk["global_batch_size"], blk["num_layers_per_virtual_pipeline_stage"],
            blk["allow_padding_num_layers"], blk["seq_length"], blk["fp16"]) == (30, 8, 96, 1, True, 1024, True)
    assert row["ZB 6.2B m32 ZB-1p h.o."][3]["zero_bubble_max_pending_backward"] == 8
    # the fork's script exports CUDA_DEVICE_MAX_CONNECTIONS=1 for every schedule; tp = 1 would not set it
    spec = load_text(pt._yaml("zb", 8, blk, pt.ZB_ENV))
    assert pt.ZB_ENV == {"CUDA_DEVICE_MAX_CONNECTIONS": 1} and spec.env == pt.ZB_ENV


@pytest.mark.parametrize("sched", ["1F1B", "1F1B-I", "ZB-1p"])
def test_a_scaled_copy_of_each_schedule_lowers_and_runs(sched: str) -> None:
    """The 1.5B rows' layers, pp 8 and 24 microbatches at hidden 256, s 128, b 1: each stage's layers as the fork
    cuts them (no layer on the end chunks of 1F1B-I), the schedule's compute on every rank."""
    pt = _pt()
    blk = {**pt._zb_block("1.5B", 24, sched), "hidden_size": 256, "num_attention_heads": 4, "seq_length": 128,
           "micro_batch_size": 1, "global_batch_size": 24}
    spec = load_text(pt._yaml(f"zb {sched}", 8, blk))
    tl = simulate(lower_spec(spec), load_profile("dgx_a100"))
    fwd = {(s.rank, s.name.split(".")[0], s.name.split(".")[2]) for s in tl.spans
           if s.stream == "compute" and s.name.startswith("F") and s.name.count(".") >= 3}
    layers_of_stage: dict[str, set[str]] = {}
    for _, stage, layer in fwd:
        layers_of_stage.setdefault(stage, set()).add(layer)
    if sched == "1F1B-I":  # 24 one-layer chunks, the first (F0) and last (F23) without a layer
        assert "F0" not in {st for st, ls in layers_of_stage.items() if any(x.startswith("l") for x in ls)}
        assert layers_of_stage["F5"] == {"l0"}
    else:  # the first and last stage hold 2 layers, the others 3
        assert {st: len({x for x in ls if x.startswith("l")}) for st, ls in layers_of_stage.items()} == {
            "F0": 2, "F1": 3, "F2": 3, "F3": 3, "F4": 3, "F5": 3, "F6": 3, "F7": 2}
    assert {s.rank for s in tl.spans if s.stream == "compute"} == set(range(8))
    assert tl.makespan_s > 0


def test_the_papers_own_model_of_a_row() -> None:
    """Table 5 gives ZB-1p and ZB-H1 the same bubble rate in every setting (why ZB-1p is lowered as ZB-H1); the
    paper's model of the 1.5B, m = 24, 1F1B row: 24 x (18.522 + 18.086 + 9.337) ms / (1 - 0.2431) = 1.4569 s."""
    pt = _pt()
    assert pt.ZB_TABLE5["ZB-1p"] == pt.ZB_TABLE5["ZB-H1"]
    assert len(pt.ZB_TABLE6) == 12 and all(len(v) == 12 for v in pt.ZB_TABLE5.values())
    assert pt.ZB_TABLE6[("28.3B", 256)] == (10.402, 10.248, 7.698, 0.460)
    assert pt.zb_paper_time("1.5B", 24, "1F1B") == pytest.approx(24 * (18.522 + 18.086 + 9.337) / 1e3 / (1 - 0.2431))
    assert pt.zb_paper_time("28.3B", 256, "1F1B-I") == pytest.approx(256 * 28.348 / 1e3 / (1 - 0.0624))


def test_the_hop_beside_table6s_t_comm_is_the_network_models_send() -> None:
    # 1.5B fits one node (p = 8): every hop is one NVLink send of the activation, s·b·h fp16 = 1024·6·2304·2 bytes,
    # batched (1F1B's batch_isend_irecv) on the 8-rank pipeline's communicator, whose cost is the network model's
    # p2p there: 4 of NCCL's channels (nChannelsMin 32 -> 4 for 8 ranks; 7.1 MB parts) at 14 GB/s
    # (schedsim.network.p2p_channels), the same for every boundary
    from schedsim.network import NcclNetwork

    pt, prof = _pt(), load_profile("dgx_a100")
    net, nbytes = NcclNetwork(prof), 1024 * 6 * 2304 * 2
    assert net.p2p_channels(nbytes, tuple(range(8))) == 4
    want = net.p2p(0, 1, nbytes, tuple(range(8))).seconds
    med, mean = pt.zb_hops("1.5B", prof)
    assert med == pytest.approx(want, rel=1e-9) and mean == pytest.approx(want, rel=1e-9)
    assert 5.0e-4 < want < 5.3e-4  # 28.3 MB at 56 GB/s (+ latency): 0.517 ms against Table 6's 0.601
    assert pt.ZB_TABLE6[("1.5B", 24)][3] == 0.601
