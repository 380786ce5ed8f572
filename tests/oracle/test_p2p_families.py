"""The communicator of each batched send/recv from the Program's columns
(:func:`schedsim.lower.p2p_comms.batch_communicators`) against the object form from the graph's ops
(:mod:`tests.oracle.p2p_families`), op by op, and a case worked by hand."""

from __future__ import annotations

import glob

import pytest

from schedsim.graph.build import graph_of
from schedsim.lower import lower
from schedsim.lower.p2p_comms import batch_communicators
from schedsim.spec.loader import load_schedule, load_text
from schedsim.spec.overrides import parse_overrides
from tests.conftest import ROOT
from tests.oracle.p2p_families import graph_p2p_communicators

PIPES = ["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zbv", "dualpipev"]


def _both(prog):  # type: ignore[no-untyped-def]
    cid, comms = batch_communicators(prog)
    G = graph_of(prog)
    ids = list(G.nodes)
    ops = [G.nodes[i]["op"] for i in ids]
    c2, comms2 = graph_p2p_communicators(G, ops, {o: i for i, o in enumerate(ids)})
    pos = {o: i for i, o in enumerate(prog.ids())}
    cols = [comms[cid[pos[o]]] if cid[pos[o]] >= 0 else None for o in ids]
    objs = [comms2[c] if c >= 0 else None for c in c2.tolist()]
    return cols, objs


SHIPPED = sorted(glob.glob(str(ROOT / "schedules" / "*.yaml")))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.rsplit("/", 1)[-1])
def test_shipped_schedules_agree(path: str) -> None:
    cols, objs = _both(lower(load_schedule(path)))
    assert cols == objs


@pytest.mark.parametrize("sched", PIPES)
def test_pipelines_agree_and_run_on_the_pipelines_ranks(sched: str) -> None:
    """torch.distributed.pipelining issues every stage's p2p on the pipeline's process group: with p = 4, every
    batched send/recv's communicator is ranks 0-3, whether the block batches them (pp_send/pp_recv) or overlaps
    them on per-peer streams (pp_sendF_r1, ...)."""
    try:
        spec = load_schedule(ROOT / "schedules" / "pipeline_schedules.yaml",
                             parse_overrides(["p=4", "m=8", f"schedule={sched}"]))
    except Exception as e:  # a schedule this file's parameters do not take
        pytest.skip(str(e))
    cols, objs = _both(lower(spec))
    assert cols == objs
    assert {c for c in cols if c is not None} <= {(0, 1, 2, 3)}


def test_a_batch_name_used_on_every_rank_is_each_ranks_own_call() -> None:
    """Pairs 0 -> 1 on stream a (batch x on both ranks) and 1 -> 2 on stream b (batch y on rank 1, x on rank 2).
    A batch is one rank's call: rank 2's x is not rank 0's, so families a and b never meet and the communicators are
    {0, 1} and {1, 2} (taking the batch name alone joined them into {0, 1, 2})."""
    text = """\
schema_version: 1
name: two_pairs
world_size: 3
ops:
  - {name: s, kind: send, peer: 1, bytes: 4096, stream: a, p2p_batch: x, when: "rank == 0"}
  - {name: r, kind: recv, peer: 0, bytes: 4096, stream: a, p2p_batch: x, when: "rank == 1"}
  - {name: s2, kind: send, peer: 2, bytes: 4096, stream: b, p2p_batch: y, when: "rank == 1"}
  - {name: r2, kind: recv, peer: 1, bytes: 4096, stream: b, p2p_batch: x, when: "rank == 2"}
"""
    prog = lower(load_text(text))
    cid, comms = batch_communicators(prog)
    assert sorted(comms[c] for c in cid.tolist()) == [(0, 1), (0, 1), (1, 2), (1, 2)]
    cols, objs = _both(prog)
    assert cols == objs
