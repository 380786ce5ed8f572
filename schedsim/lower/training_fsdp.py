"""torch FSDP2 in a Megatron training step (``use_torch_fsdp2``): the all-gathers and reduce-scatters FSDP2
issues around each unit's kernels, added to a stage's phase lists (:func:`schedsim.lower.training.stage_lists`'
entries, the same dict form)."""

from __future__ import annotations

from typing import Any

from schedsim.spec.training_block import TrainingPlan, TrainingSpec
from schedsim.units import DTYPE_BYTES

__all__ = ["FSDP_AG_STREAM", "FSDP_RS_STREAM", "fsdp_unit", "with_fsdp"]

Entry = dict[str, Any]


def _coll(name: str, kind: str, nbytes: float, dtype: str) -> Entry:
    """A collective of a stage list over the data-parallel (dp·cp) group: the form of
    :func:`schedsim.lower.training._coll` with ``group="dp"``."""
    return {"name": name, "kind": kind, "bytes": float(nbytes), "dtype": dtype, "tp": True, "group": "dp"}


#: Streams of FSDP2's all-gathers and reduce-scatters (``FSDPCommContext``: ``all_gather_stream``,
#: ``reduce_scatter_stream``; :func:`with_fsdp`).
FSDP_AG_STREAM = "fsdp_all_gather"
FSDP_RS_STREAM = "fsdp_reduce_scatter"


def fsdp_unit(name: str) -> str | None:
    """The FSDP unit (:func:`schedsim.spec.training_block.fsdp_units`) whose parameters the stage-list entry
    ``name`` uses: ``l<k>`` for a layer's ops (its recomputation included), ``embedding`` and ``output`` for the
    embedding's and the output layer's (their TP collectives included), None for the root's (final LayerNorm,
    cross-entropy)."""
    if name.startswith("l") and "." in name:
        return name.split(".", 1)[0]
    if name.startswith(("embedding", "tp_embedding")):
        return "embedding"
    return "output" if "logits" in name else None


def with_fsdp(lists: dict[str, list[Entry]], t: TrainingSpec, plan: TrainingPlan) -> dict[str, list[Entry]]:
    """One stage's phases (F, I, W) with torch FSDP2's collectives (``use_torch_fsdp2``), in the order FSDP2
    issues them (``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, ``_fsdp_state.py``; the
    ``fully_shard`` docs, "implicit prefetching"):

    * **all-gather** of a unit's parameters (``fsdp_ag_<unit>``: the unit's parameters of this TP rank × the
      parameters' bytes, the nccl-tests size; over the dp·cp ranks, Megatron's
      ``get_data_parallel_group(with_context_parallel=True)``) on stream :data:`FSDP_AG_STREAM`, before the
      unit's forward and again before its backward (Megatron's default ``reshard_after_forward=True`` frees the
      parameters after the forward). The unit's first kernel waits for it (``wait_for_unshard``). The units of a
      phase are taken in the order their kernels run (forward: embedding, layers, output layer; backward the
      reverse) and each unit's all-gather is issued one unit ahead: the all-gather of unit j + 1 waits for the
      all-gather of unit j and for the kernel before unit j (FSDP2's all-gather stream waits for the copy-out
      event of the previous all-gather, recorded when unit j starts: ``AllGatherState`` in the forward,
      ``_wait_all_gather_streams_on_event`` in the backward), so it runs while unit j computes: the forward's
      implicit prefetch (the CPU issues unit j + 1's pre-forward while the GPU runs unit j), and the backward's
      prefetch of the previous layer (``_backward_prefetch``; Megatron sets ``set_modules_to_backward_prefetch
      ([prev_module])`` explicitly under recomputation, the same order). The forward's first all-gather also
      waits for the rank's last compute-stream kernel before it (the previous microbatch's backward: FSDP2's
      ``_root_pre_forward`` makes the all-gather streams ``wait_stream`` the current stream, "Wait for optimizer
      before implicitly prefetched all-gathers"; :attr:`~schedsim.lower.pipeline_emitter.ProtoPlace.
      after_compute`); the backward's first waits only for its stream;
    * **reduce-scatter** of the unit's gradients (``fsdp_rs_<unit>``: the unit's parameters × the parameters'
      bytes, as FSDP2 without a ``MixedPrecisionPolicy`` reduces them) on stream :data:`FSDP_RS_STREAM` after the
      unit's last gradient kernel (``post_backward``: the reduce-scatter stream waits for the compute stream),
      every microbatch (Megatron's FSDP2 wrapper has no ``no_sync``).

    Not modelled: the all-gather copy-in / copy-out and reduce-scatter copy-in kernels, and the root unit's
    (final LayerNorm) own all-gather."""
    from schedsim.spec.training_block import fsdp_units

    sizes = fsdp_units(t, plan)
    e = DTYPE_BYTES[plan.dtype]
    out: dict[str, list[Entry]] = {}
    for phase, lst in lists.items():
        firsts: dict[str, int] = {}
        for i, o in enumerate(lst):
            u = fsdp_unit(str(o["name"]))
            if u is not None and u not in firsts:
                firsts[u] = i
        units = list(firsts) if phase != "W" else []
        ag_at: dict[int, list[Entry]] = {}
        for j, u in enumerate(units):
            at = firsts[units[j - 1]] if j else firsts[u]  # unit j's all-gather is issued before unit j - 1's kernels
            after = [f"fsdp_ag_{units[j - 1]}"] if j else []
            if j and at > 0 and str(lst[at - 1]["name"]) not in after:
                after.append(str(lst[at - 1]["name"]))
            ag = {**_coll(f"fsdp_ag_{u}", "all_gather", sizes[u] * e, plan.dtype), "stream": FSDP_AG_STREAM,
                  "after": after}
            if phase == "F" and j == 0 and at == 0:  # the root pre-forward's wait for the current stream
                ag["after_compute"] = True
            ag_at.setdefault(at, []).append(ag)
        row: list[Entry] = []
        waits = {firsts[u]: f"fsdp_ag_{u}" for u in units}
        for i, o in enumerate(lst):
            row += ag_at.get(i, [])
            if i in waits:
                o = {**o, "after": [*o.get("after", []), waits[i]]}
            row.append(o)
        out[phase] = row
    # each unit's reduce-scatter after its last gradient kernel of the backward (W, or I where none is in W)
    last: dict[str, tuple[str, int]] = {}
    for phase in ("I", "W"):
        for i, o in enumerate(out[phase]):
            u = fsdp_unit(str(o["name"]))
            if u is not None and not str(o["name"]).startswith("fsdp_") and o.get("stream", "") in ("", "compute"):
                last[u] = (phase, i)
    for u, (phase, i) in sorted(last.items(), key=lambda kv: -kv[1][1]):  # from the end: indices stay valid
        lst = out[phase]
        lst.insert(i + 1, {**_coll(f"fsdp_rs_{u}", "reduce_scatter", sizes[u] * e, plan.dtype),
                           "stream": FSDP_RS_STREAM, "after": [str(lst[i]["name"])]})
    return out
