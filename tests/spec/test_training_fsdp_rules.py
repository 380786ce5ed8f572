"""``use_torch_fsdp2`` in the ``training:`` block: the combinations Megatron-LM refuses (its reason, the key's line,
a fix, exit 2) and the memory per GPU by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from tests.lower.test_training_fsdp import EMB, FSDP, LAYER


def _check(tmp_path: Path, text: str) -> tuple[int, str]:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    r = CliRunner().invoke(app, ["check", str(p)])
    return r.exit_code, r.stderr if r.exit_code else r.stdout


@pytest.mark.parametrize(("old", "new", "line", "field", "words"), [
    ("world_size: 2", "world_size: 4", 15, "training.pp", "--use-torch-fsdp2 is not supported with pipeline "
     "parallelism"),
    ("num_layers: 2", "num_layers: 2\n  num_experts: 2\n  ep: 2", 7, "training.ep",
     "--use-torch-fsdp2 is not supported with expert parallelism"),
    ("bf16: true", "bf16: true\n  use_distributed_optimizer: true", 13, "training.use_distributed_optimizer",
     "--use-torch-fsdp2 is not supported with MCore's distributed optimizer"),
    ("  untie_embeddings_and_output_weights: true\n", "", 13, "training.use_torch_fsdp2",
     "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"),
    ("bf16: true", "fp16: true", 12, "training.fp16", "--use-torch-fsdp2 not supported with fp16 yet"),
    ("world_size: 2", "world_size: 2\nenv: {CUDA_DEVICE_MAX_CONNECTIONS: 1}", 15, "training.use_torch_fsdp2",
     "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one"),
])
def test_megatron_refusals(tmp_path: Path, old: str, new: str, line: int, field: str, words: str) -> None:
    text = FSDP.replace(old, new)
    if "world_size: 4" in text:
        text += "  pp: 2\n"
    code, err = _check(tmp_path, text)
    assert code == 2, err
    first = err.splitlines()[0]
    assert words in first and "Megatron-LM arguments.py" in first, first
    assert f"s.yaml:{line}:" in first and f": {field}" in first, first
    assert err.splitlines()[1].startswith("  fix: ") and "Traceback" not in err


def test_the_tiny_configuration_passes(tmp_path: Path) -> None:
    code, err = _check(tmp_path, FSDP)
    assert code == 0, err


def test_memory_per_rank_by_hand() -> None:
    """bf16, dp 2: every parameter a half shard. Parameters n = 2 layers + embedding + output layer V·h + final
    LayerNorm 2h = 2·49,984 + 67,584 + 65,536 + 128 = 233,216; params and
    grads 2 bytes / 2, optimizer 12 bytes (fp32 main weight, two Adam moments) / 2; gathered: the largest two
    units that run one after the other (embedding 67,584 and layer 0 49,984 parameters) in bf16; activations as
    without FSDP."""
    from schedsim.spec.loader import load_text
    from schedsim.spec.training_block import memory_per_rank, training_plan

    spec = load_text(FSDP)
    t = spec.training
    assert t is not None
    mem = memory_per_rank(t, training_plan(t, 2))
    n = 2 * LAYER + EMB + 1024 * 64 + 2 * 64
    assert n == 233_216
    assert mem["params"] == mem["grads"] == n and mem["optimizer"] == 6 * n
    assert mem["gathered"] == 2 * (EMB + LAYER) == 235_136
    plain = t.model_copy(update={"use_torch_fsdp2": False})
    assert mem["activations"] == memory_per_rank(plain, training_plan(plain, 2))["activations"]
    assert mem["total"] == pytest.approx(sum(v for k, v in mem.items() if k != "total"))
    assert list(mem) == ["params", "grads", "optimizer", "gathered", "activations", "total"]


def test_gathered_memory_is_a_unit_and_the_next_one_prefetched() -> None:
    """FSDP2 holds at most the unit computing and the one prefetched after it (forward: embedding, layers, output
    layer; the backward the reverse), never the embedding and the output layer together when a layer runs between
    them: with a 50,000-word vocabulary and one layer of h = 64 the peak pair is the embedding (V·h + s·h =
    50,048·64 + 32·64) with layer 0 (49,984), not the embedding with the output layer (50,048·64 + 2·64)."""
    from schedsim.spec.loader import load_text
    from schedsim.spec.training_block import fsdp_units, memory_per_rank, training_plan

    spec = load_text(FSDP.replace("num_layers: 2", "num_layers: 1").replace("vocab_size: 1000", "vocab_size: 50000"))
    t = spec.training
    assert t is not None
    plan = training_plan(t, 2)
    units = fsdp_units(t, plan)
    emb, out = 50_048 * 64 + 32 * 64, 50_048 * 64 + 2 * 64
    assert units == {"embedding": emb, "l0": LAYER, "output": out}
    assert memory_per_rank(t, plan)["gathered"] == 2 * (emb + LAYER) == 6_510_208
