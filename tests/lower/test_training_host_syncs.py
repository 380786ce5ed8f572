"""A ``training:`` block's host synchronisations (``get_batch_sync``, ``check_for_nan_in_loss_and_grad``): where
Megatron's code puts them (sail-sg/zero-bubble-pipeline-parallelism 425b42e, pretrain_gpt.py ``get_batch`` and
``loss_func``), on a 6-layer model padded to 8 on pp 4, one layer a chunk (1F1B-I, 8 virtual stages), m = 4: the
first rank's host waits before each microbatch's embedding (stage 0), the last rank's before each final LayerNorm
(stage 7: the chunk is empty but for the head) and after each cross-entropy, i.e. before the next op."""

from __future__ import annotations

from schedsim.api import lower_spec
from schedsim.hardware.profile import load_profile
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text

BLOCK = """schema_version: 1
name: zb
world_size: 4
env: {{CUDA_DEVICE_MAX_CONNECTIONS: 1}}
training:
  num_layers: 6
  hidden_size: 1024
  num_attention_heads: 16
  seq_length: 1024
  vocab_size: 51200
  fp16: true
  micro_batch_size: 1
  global_batch_size: 4
  tp: 1
  pp: 4
  allow_padding_num_layers: true
  num_layers_per_virtual_pipeline_stage: 1
{extra}"""

SYNCS = "  get_batch_sync: true\n  check_for_nan_in_loss_and_grad: true\n"


def _waits(extra: str) -> list[str]:
    prog = lower_spec(load_text(BLOCK.format(extra=extra)))
    return [prog.op_id(i) for i in range(prog.N)
            if "host_wait_before_us" in dict(prog.tagsets[int(prog.tags_id[i])])]


def test_the_host_waits_sit_where_get_batch_and_the_loss_check_are() -> None:
    want = [f"F0.{k}.embedding@r0" for k in range(4)] + [
        "F7.0.final_ln@r3", "recvF7.1@r3", "F7.1.final_ln@r3", "recvF7.2@r3", "F7.2.final_ln@r3", "recvF7.3@r3",
        "F7.3.final_ln@r3", "B7.3.I.cross_entropy_bwd@r3"]
    assert _waits(SYNCS) == want
    assert _waits("  get_batch_sync: true\n") == want[:4] + [w for w in want if "final_ln" in w]
    assert _waits("") == []


def test_the_syncs_only_delay() -> None:
    prof = load_profile("dgx_a100")
    plain = simulate(lower_spec(load_text(BLOCK.format(extra=""))), prof)
    synced = simulate(lower_spec(load_text(BLOCK.format(extra=SYNCS))), prof)
    assert synced.makespan_s >= plain.makespan_s
    assert synced.meta["host_waits"]["rank"].count(0) == 4
