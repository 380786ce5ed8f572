"""Static stage memory: parameters, gradients, optimizer state and embedding/LM-head placement."""

from __future__ import annotations

import pytest
import yaml

from schedsim.graph.build import build_graph
from schedsim.pipeline.memory import BYTES_PER_PARAM, static_memory
from schedsim.spec.loader import load_text
from schedsim.spec.pipeline_block import stage_params

# h=8, f=32: per layer 4h² + 4h (attention) + h·f + f·h (MLP) = 256 + 32 + 256 + 256 = 800 parameters
T = {"layers": 4, "hidden": 8, "ffn": 32, "heads": 2, "seq": 4, "vocab": 16}
EMB = 16 * 8 + 4 * 8   # word + learned position embedding
HEAD = 16 * 8 + 2 * 8  # output layer + final LayerNorm


def info(schedule: str, **extra):
    d = {"schema_version": 1, "name": "m", "world_size": 2,
         "pipeline": {"schedule": schedule, "p": 2, "m": 4, "transformer": {**T, **extra}}}
    return build_graph(load_text(yaml.safe_dump(d))).graph["pipeline"]["static_memory"]


def test_zb_h1_puts_embedding_and_head_on_first_and_last_rank():
    mem = info("zb_h1")
    assert mem["params"] == {0: 2 * 800 + EMB, 1: 2 * 800 + HEAD}
    assert mem["bytes"] == {r: n * 16 for r, n in mem["params"].items()}


def test_zbv_puts_both_on_rank_0_so_the_peaks_differ():
    mem = info("zbv")  # 4 stages of 1 layer; rank 0 runs stages 0 and 3
    assert mem["params"] == {0: 2 * 800 + EMB + HEAD, 1: 2 * 800}
    assert max(mem["bytes"].values()) > max(info("zb_h1")["bytes"].values())


def test_without_vocab_only_layers_count():
    assert info("1f1b", vocab=None)["params"] == {0: 1600, 1: 1600}


@pytest.mark.parametrize("stages,ranks", [(4, {0: 0, 1: 1, 2: 1, 3: 0}), (4, {0: 0, 1: 1, 2: 0, 3: 1})])
def test_static_memory_sums_stages_per_rank(stages, ranks):
    ps = stage_params(stages, 3, 10, hidden=2, seq=3, vocab=5)
    mem = static_memory(ps, ranks)
    assert sum(mem.params.values()) == stages * 30 + (5 * 2 + 3 * 2) + (5 * 2 + 2 * 2)
    assert BYTES_PER_PARAM == 2 + 2 + 4 + 4 + 4
