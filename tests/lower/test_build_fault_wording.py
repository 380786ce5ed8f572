"""The build-time faults that :func:`schedsim.lower.link.link` finds on the expansion's arrays (names used twice,
unknown or self dependencies, a dependency inside a p2p batch, collective members that differ or are missing,
send/recv pairs whose tags, messages or sizes disagree, unmatched sends or recvs) are worded from those arrays
(:func:`schedsim.lower.link.build_fault`): each is raised by the lowering alone and equals the error of the
object-based build (text, class, fix, issue grid, op ids), the test oracle ``tests/oracle/object_build.py``, which
the package cannot import (``tests/quality/test_layers.py``)."""

from __future__ import annotations

import ast
import random
from pathlib import Path
from typing import Any

import pytest

from schedsim import api
from schedsim.errors import DeadlockError, GraphError, SchedsimError
from schedsim.lower import link as link_module
from schedsim.lower import lower
from tests.oracle.object_build import graph_from_ops
from tests.oracle.unlinked_ops import unlinked_ops

PIPELINE = ("pipeline:\n  schedule: 1f1b\n  p: 2\n  m: 2\n"
            "  stage: {forward: [{name: f, kind: compute, duration_us: 1}], "
            "backward_input: [{name: b, kind: compute, duration_us: 1}]}\n")


def _spec(ops: str, world: int = 2, extra: str = "") -> Any:
    return api.load_text(f"schema_version: 1\nname: bad\nworld_size: {world}\n{extra}ops:\n{ops}")


def _fields(e: BaseException | None) -> tuple[Any, ...] | None:
    if e is None:
        return None
    return (type(e), str(e), getattr(e, "fix", None), getattr(e, "detail", None), tuple(getattr(e, "ops", ())))


def _both(spec: Any) -> tuple[SchedsimError | None, SchedsimError | None]:
    """``(array, oracle)``: the error of the lowering (no static checks), and that of the object-based build on the
    same unlinked ops (None: no error)."""
    seen: list[tuple[Any, str]] = []
    real = link_module.build_fault

    def spy(cols: Any, file: str, represented: tuple[int, ...] = ()) -> GraphError:
        seen.append((cols, file))
        return real(cols, file, represented)

    mine: SchedsimError | None = None
    with pytest.MonkeyPatch.context() as m:
        m.setattr(link_module, "build_fault", spy)
        try:
            prog = lower(spec, check=False)
        except SchedsimError as e:
            mine = e
    if seen:
        ops, file = unlinked_ops(seen[0][0]), seen[0][1]
    else:
        ops, file = prog.ops(), prog.file
    try:
        graph_from_ops(ops, {}, file, check=False)
    except SchedsimError as e:
        return mine, e
    return mine, None



CASES = {
    "name used twice (pipeline and hand-written)": (
        "  - {name: F0.0.f, kind: compute, duration_us: 1, ranks: [0]}\n", PIPELINE, GraphError,
        "pipeline: op name 'F0.0.f' is used twice on rank 0 (also by <string>:10 (ops[0]))\n  fix: rename one of them "
        "(pipeline ops are named F<stage>.<mb>.<op>, so stage op names must be unique and hand-written ops must not "
        "reuse them)"),
    "unknown dependency, did you mean": (
        "  - {name: a, kind: compute, duration_us: 1, deps: [bb]}\n  - {name: b, kind: compute, duration_us: 1}\n", "",
        GraphError, "<string>:5 (ops[0]): op 'a' on rank 0 depends on 'bb', which does not exist on rank 0\n"
        "  fix: did you mean 'b'?"),
    "unknown dependency, on another rank": (
        "  - {name: a, kind: compute, duration_us: 1, ranks: [0]}\n"
        "  - {name: b, kind: compute, duration_us: 1, ranks: [1], deps: [a]}\n", "", GraphError,
        "<string>:6 (ops[1]): op 'b' on rank 1 depends on 'a', which does not exist on rank 1\n  fix: 'a' exists only "
        "on rank(s) [0]; dependencies are per rank, cross-rank order comes from collectives and send/recv"),
    "unknown dependency, no close name": (
        "  - {name: a, kind: compute, duration_us: 1, deps: [zzz]}\n", "", GraphError,
        "<string>:5 (ops[0]): op 'a' on rank 0 depends on 'zzz', which does not exist on rank 0\n"
        "  fix: check the spelling"),
    "self dependency": (
        "  - foreach: {k: range(2)}\n    ops:\n      - {name: 'a{k}', kind: compute, duration_us: 1, deps: ['a{k}']}\n",
        "", GraphError, "<string>:7 (ops[0].ops[0]): op 'a0' depends on itself\n  fix: remove it from its deps"),
    "dependency inside a p2p batch": (
        "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x}\n"
        "  - {name: s2, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x, deps: [s]}\n"
        "  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y}\n"
        "  - {name: r2, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y}\n", "", GraphError,
        "<string>:6 (ops[1]): send 's2' depends on 's', but both are in p2p_batch 'x' on rank 0: one batch is one NCCL "
        "group launch (batch_isend_irecv), posted whole, so nothing inside it runs after another member\n"
        "  fix: remove the dependency, or move one of them to another p2p_batch"),
    "collective members differ": (
        "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x}\n"
        "  - {name: a, kind: all_reduce, bytes: 8, ranks: [0]}\n"
        "  - {name: a, kind: all_gather, bytes: 16, ranks: [1], dtype: bf16}\n"
        "  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y}\n", "", DeadlockError,
        "<string>:7 (ops[2]): collective 'a' over group [0, 1] is an all_gather of 16 B (bf16, root 0) on rank 1 but "
        "an all_reduce of 8 B (fp32, root 0) on rank 0; NCCL would hang or corrupt data\n  fix: give every rank's "
        "entry the same kind, size, dtype and root\n\nNCCL issue order (communication launches per rank; batches "
        "joined by +):\n          Rank 0  Rank 1  \nStep 000:  s      *a\nStep 001: *a       r\n"
        "(* = the ops that block)"),
    "collective never issued on a rank": (
        "  - {name: a, kind: all_reduce, bytes: 8, ranks: [0], group: [0, 1]}\n", "", DeadlockError,
        "<string>:5 (ops[0]): collective 'a' over group [0, 1] is issued on rank(s) [0] but never on rank(s) [1]; real "
        "NCCL would hang\n  fix: issue 'a' on every rank of its group (or shrink `group`)\n\nNCCL issue order "
        "(communication launches per rank; batches joined by +):\n          Rank 0  Rank 1  \nStep 000: *a\n"
        "(* = the ops that block)"),
    "pair of different sizes": (
        "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0]}\n"
        "  - {name: r, kind: recv, peer: 0, bytes: 16, ranks: [1]}\n", "", DeadlockError,
        "<string>:5 (ops[0]): NCCL pairs the sends and recvs between two ranks in issue order (it has no tags): send "
        "s@r0 (8 B) is paired with recv r@r1 (16 B); sizes differ. Real NCCL would fail, hang, or deliver the wrong "
        "tensor\n  fix: give the matching send and recv the same size"),
    "pair of different tags, a later recv meant": (
        "  - {name: s1, kind: send, peer: 1, bytes: 8, ranks: [0], tag: x}\n"
        "  - {name: s2, kind: send, peer: 1, bytes: 8, ranks: [0], tag: y}\n"
        "  - {name: r2, kind: recv, peer: 0, bytes: 16, ranks: [1], tag: y}\n"
        "  - {name: r1, kind: recv, peer: 0, bytes: 8, ranks: [1], tag: x}\n", "", DeadlockError,
        "<string>:5 (ops[0]): NCCL pairs the sends and recvs between two ranks in issue order (it has no tags): send "
        "s1@r0 (tag 'x') is paired with recv r2@r1 (tag 'y'), and their sizes differ (8 B vs 16 B). Real NCCL would "
        "fail, hang, or deliver the wrong tensor\n  fix: issue rank 0's sends to rank 1 in the order rank 1 posts its "
        "recvs from rank 0 (r2, r1), or reorder those recvs"),
    "pair of different messages": (
        "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0], tags: {msg: g}}\n"
        "  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], tags: {msg: h}}\n", "", DeadlockError,
        "<string>:5 (ops[0]): NCCL pairs the sends and recvs between two ranks in issue order (it has no tags): send "
        "s@r0 (message g) is paired with recv r@r1 (message h). Real NCCL would fail, hang, or deliver the wrong "
        "tensor\n  fix: issue rank 0's sends to rank 1 in the order rank 1 posts its recvs from rank 0 (r), or "
        "reorder those recvs"),
    "unmatched sends": (
        "  - {name: s1, kind: send, peer: 1, bytes: 8, ranks: [0]}\n"
        "  - {name: s2, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: q}\n"
        "  - {name: s3, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: q}\n"
        "  - {name: r1, kind: recv, peer: 0, bytes: 8, ranks: [1]}\n", "", DeadlockError,
        "<string>:6 (ops[1]): unmatched send s2@r0, s3@r0: rank 0 sends 3 message(s) to rank 1 but rank 1 receives 1; "
        "real NCCL would hang\n  fix: add the matching recv on rank 1 (sends and recvs between two ranks match in "
        "issue order)\n\nNCCL issue order (communication launches per rank; batches joined by +):\n"
        "          Rank 0  Rank 1  \nStep 000:  s1      r1\nStep 001: *s2+s3\n(* = the ops that block)"),
    "unmatched recv": (
        "  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1]}\n", "", DeadlockError,
        "<string>:5 (ops[0]): unmatched recv r@r1: rank 0 sends 0 message(s) to rank 1 but rank 1 receives 1; real "
        "NCCL would hang\n  fix: add the matching send on rank 0 (sends and recvs between two ranks match in issue "
        "order)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_build_fault_is_worded_from_the_arrays(case: str) -> None:
    ops, extra, cls, text = CASES[case]
    spec = _spec(ops, extra=extra)
    mine, ref = _both(spec)
    assert ref is not None and type(ref) is cls and str(ref).startswith(text)
    assert _fields(mine) == _fields(ref)
    with pytest.raises(SchedsimError) as fast:
        lower(spec)
    assert _fields(fast.value) == _fields(ref)


def test_link_imports_no_networkx_graph() -> None:
    """lower/link.py (and the wording it calls) does not build the networkx graph."""
    root = Path(link_module.__file__).parent
    for path in (root / "link.py", root / "check_errors.py", root / "p2p.py"):
        tree = ast.parse(path.read_text())
        names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "schedsim.graph.build" not in names, path


RARE = 0.06  # each fault is rare, so that the first one met varies


def _compute(rng: random.Random, w: int) -> list[list[str]]:
    """Per rank, compute ops with dependencies on earlier ops of the rank, and rarely on itself, a near-miss
    spelling, a name of no rank or a name of another rank (``y<r>``, which some ranks have)."""
    per_rank: list[list[str]] = []
    for r in range(w):
        names = [f"x{j}" for j in range(rng.randint(1, 4))]
        entries = []
        for j, name in enumerate(names):
            deps = [names[i] for i in range(j) if rng.random() < 0.3]
            if rng.random() < RARE:
                deps.append(rng.choice([name, name + "q", "x9", f"y{(r + 1) % 3}"]))
            entries.append(f"{{name: {name}, kind: compute, duration_us: 1, ranks: [{r}], deps: {deps}}}")
        if rng.random() < 0.3:
            entries.append(f"{{name: y{r}, kind: compute, duration_us: 1, ranks: [{r}]}}")
        per_rank.append(entries)
    return per_rank


def _collectives(rng: random.Random, per_rank: list[list[str]]) -> None:
    """Collectives over all ranks or a pair, rarely left out on a rank or given another kind, size or dtype
    (all_to_all: sizes may differ)."""
    w = len(per_rank)
    for k in range(rng.randint(0, 2)):
        group = list(range(w)) if w < 3 or rng.random() < 0.5 else [0, 2]
        kind = rng.choice(["all_reduce", "all_to_all"])
        for r in group:
            if rng.random() < RARE:
                continue
            k2 = rng.choice(["all_gather", "broadcast"]) if rng.random() < RARE else kind
            size = 128 if rng.random() < 2 * RARE else 64
            dtype = "bf16" if rng.random() < RARE else "fp32"
            per_rank[r].insert(rng.randint(0, len(per_rank[r])), f"{{name: c{k}, kind: {k2}, bytes: {size}, "
                               f"dtype: {dtype}, ranks: [{r}], group: {group}}}")


def _p2p(rng: random.Random, per_rank: list[list[str]]) -> None:
    """Sends and recvs between neighbours, maybe batched, rarely one too many, with another size, tag or message,
    or a batch member depending on another."""
    w = len(per_rank)
    for a in range(w):
        b = (a + 1) % w
        if a == b or rng.random() < 0.4:
            continue
        count, batch = rng.randint(1, 3), rng.random() < 0.5
        for r, kind, peer in ((a, "send", b), (b, "recv", a)):
            for k in range(count + (1 if rng.random() < RARE else 0)):
                extra = f", p2p_batch: q{a}" if batch else ""
                if batch and k and rng.random() < RARE:
                    extra += f", deps: [{kind}{a}_{k - 1}]"
                if rng.random() < RARE:
                    extra += rng.choice([", tag: t1", ", tag: t2", ", tags: {msg: m1}", ", tags: {msg: m2}"])
                size = 16 if rng.random() < RARE else 8
                per_rank[r].insert(rng.randint(0, len(per_rank[r])), f"{{name: {kind}{a}_{k}, kind: {kind}, peer: "
                                   f"{peer}, bytes: {size}, ranks: [{r}]{extra}}}")


def _random_schedule(rng: random.Random) -> str:
    """1-3 ranks of :func:`_compute`, :func:`_collectives` and :func:`_p2p` ops in a random order per rank; with two
    ranks maybe a pipeline block, and hand-written ops of its names."""
    w = rng.randint(1, 3)
    per_rank = _compute(rng, w)
    _collectives(rng, per_rank)
    _p2p(rng, per_rank)
    pipe = ""
    if w == 2 and rng.random() < 0.25:  # its sends and recvs pair with the hand-written ones in issue order
        pipe = PIPELINE
        for r, mb in rng.sample([(0, 0), (0, 1), (1, 0), (1, 1)], rng.choice((0, 0, 1, 3))):
            per_rank[r].insert(rng.randint(0, len(per_rank[r])),
                               f"{{name: F{r}.{mb}.f, kind: compute, duration_us: 1, ranks: [{r}]}}")
    ops = "".join(f"  - {o}\n" for entries in per_rank for o in entries)
    return f"schema_version: 1\nname: g\nworld_size: {w}\n{pipe}ops:\n{ops}"


FAMILIES = ("is used twice on rank", "which does not exist on rank", "depends on itself", "but both are in p2p_batch",
            "NCCL would hang or corrupt data", "but never on rank(s)", "is paired with recv", "unmatched")


def test_array_wording_equals_the_object_build_on_random_schedules() -> None:
    rng = random.Random(0)
    seen: dict[str, int] = {}
    for _ in range(400):
        text = _random_schedule(rng)
        try:
            spec = api.load_text(text)
        except SchedsimError:  # a fault the loader words (a 1-rank collective without its group, ...)
            continue
        mine, ref = _both(spec)
        assert _fields(mine) == _fields(ref), text
        if ref is not None:
            family = next(f for f in FAMILIES if f in str(ref))
            seen[family] = seen.get(family, 0) + 1
    assert set(seen) == set(FAMILIES), seen  # each family was drawn first somewhere


TRAINING = ("schema_version: 1\nname: x\nworld_size: 4\ntraining: {num_layers: 2, hidden_size: 64, "
            "num_attention_heads: 8, seq_length: 32, micro_batch_size: 2, global_batch_size: 16, vocab_size: 1000, "
            "tp: 1, bf16: true}\nops:\n")


@pytest.mark.parametrize("ops", [
    "  - {name: a, kind: all_reduce, bytes: 8, ranks: [1], group: [0, 1]}\n",
    "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0]}\n",
])
def test_a_symmetric_lowerings_build_fault_is_the_every_rank_lowerings(ops: str) -> None:
    """A symmetric training lowering issues the data-parallel collectives on its represented ranks only (here rank
    0); the build fault of a hand-written op beside it is worded as the every-rank lowering words it (the object
    build, which knows no represented ranks, named the gradient all_reduce as never issued on ranks [1, 2, 3])."""
    spec = api.load_text(TRAINING + ops)
    plain = api.load_text(TRAINING + "  - {name: c, kind: compute, duration_us: 1}\n")
    assert lower(plain, check=False, symmetric=True).represented == (0,)
    errors = []
    for symmetric in (False, True):
        with pytest.raises(DeadlockError) as e:
            lower(spec, symmetric=symmetric)
        errors.append(e.value)
    assert "dp_grad_all_reduce" not in errors[1].message
    # the same fault (the issue grid differs: the symmetric Program holds no ops of ranks 1-3)
    assert (errors[1].message, errors[1].fix, errors[1].ops) == (errors[0].message, errors[0].fix, errors[0].ops)
    want = ("collective 'a' over group [0, 1] is issued on rank(s) [1] but never on rank(s) [0]" if "all_reduce" in ops
            else "unmatched send s@r0")
    assert errors[0].message.startswith("<string>:6 (ops[0]): " + want)
