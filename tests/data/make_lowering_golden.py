"""Write tests/data/lowering_golden.npz: every array, name, tag set, stream and string of the Programs that
``lower()`` gives the cases of :func:`cases` (small pipelines of every built-in schedule kind and custom
inline actions). Made with the lowering of main at commit fb50fe6 (2026-12-01), before the lowering's
speed-ups; tests/lower/test_lowering_golden.py asserts that today's lowering gives the same. Case ``1f1b_dp2``
alone was rewritten for the data-parallel tail of issue 33 (its gradient all-reduce on stream ``dp_comm``
after the rank's last compute op, the tied all-reduce after it). Cases ``interleaved_1f1b_overlapped`` and
``interleaved_1f1b_one_op`` alone were rewritten for Megatron's ``overlap_p2p_comm`` issue order (a steady step's
forward call before its backward, issue 36, branch zb36o): the same ops with the same dependencies, in another
program order; and again for the waits of that mode (a recv after the compute issued before it, a pass after the
previous call of its direction: issue 36, branch sync36p), the same ops in the same order with more dependencies.

Usage: python tests/data/make_lowering_golden.py [ROOT]  (ROOT: the checkout whose lowering writes it, default
this one)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, sys.argv[1] if __name__ == "__main__" and len(sys.argv) > 1 else str(ROOT))

STAGE = {"forward": [{"name": "a", "kind": "compute", "duration_us": 1}, {"name": "b", "kind": "compute",
                                                                          "duration_us": 2}],
         "backward_input": [{"name": "di", "kind": "compute", "duration_us": 2}],
         "backward_weight": [{"name": "dw", "kind": "compute", "duration_us": 1}]}

ARRAYS = ("tmpl", "rank", "seq", "name_id", "tags_id", "stream_id", "peer", "batch", "msg", "dep_ptr", "dep_idx",
          "stream_edges", "dep_edges", "coll_ptr", "coll_idx", "p2p")


def cases() -> dict[str, dict[str, Any]]:
    """Case name -> the schedule (a dict for ScheduleSpec)."""
    from schedsim.pipeline import generate

    out: dict[str, dict[str, Any]] = {}

    def add(key: str, blk: dict[str, Any], dp: int = 1) -> None:
        out[key] = {"schema_version": 1, "name": key, "world_size": blk["p"] * dp,
                    "pipeline": {"stage": STAGE, "activation_bytes": 1024, "data_parallel": dp, **blk}}

    for name, v in (("interleaved_1f1b", 2), ("1f1b", None), ("zb_h1", None), ("gpipe", None), ("zbv", None)):
        for mode in ("overlapped", "batched"):
            if name == "interleaved_1f1b" and mode == "batched":
                continue
            blk: dict[str, Any] = {"schedule": name, "p": 4, "m": 8, "p2p": mode}
            if v:
                blk["v"] = v
            add(f"{name}_{mode}", blk)
    add("1f1b_dp2", {"schedule": "1f1b", "p": 4, "m": 8, "tied_embedding_allreduce": True}, dp=2)
    one = {k: [{"kind": "compute", "duration_us": 1}] for k in ("forward", "backward_input", "backward_weight")}
    add("interleaved_1f1b_one_op", {"schedule": "interleaved_1f1b", "p": 4, "m": 8, "v": 2, "stage": one})
    add("zb_h1_one_op_batched", {"schedule": "zb_h1", "p": 4, "m": 8, "p2p": "batched", "stage": one})
    for name, v in (("interleaved_1f1b", 2), ("zb_h1", None), ("gpipe", None)):
        order = generate(name, 4, 8, v)
        acts = {r: " ".join("_" if a is None else str(a) for a in seq) for r, seq in order.items()}
        add(f"custom_{name}", {"schedule": "custom", "p": 4, "m": 8, "actions": acts, "p2p": "overlapped"})
        add(f"custom_{name}_one_op", {"schedule": "custom", "p": 4, "m": 8, "actions": acts, "p2p": "overlapped",
                                      "stage": one})
    return out


def program_state(d: dict[str, Any]) -> dict[str, np.ndarray]:
    """The Program of ``d`` (lowered with its checks) as named arrays; the interned tables as JSON text."""
    from schedsim.lower import lower
    from schedsim.spec.model import ScheduleSpec

    prog = lower(ScheduleSpec.model_validate(d))
    out = {k: np.asarray(getattr(prog, k)) for k in ARRAYS}
    text = {"names": list(prog.names), "tagsets": [list(map(list, t)) for t in prog.tagsets],
            "streams": list(prog.streams), "strs": list(prog.strs), "coll_keys": list(prog.coll_keys),
            "warnings": list(prog.warnings), "templates": [repr(t) for t in prog.templates]}
    out["text"] = np.array(json.dumps(text))
    return out


def main() -> None:
    state = {f"{case}/{k}": v for case, d in cases().items() for k, v in program_state(d).items()}
    np.savez_compressed(ROOT / "tests/data/lowering_golden.npz", **state)


if __name__ == "__main__":
    main()
