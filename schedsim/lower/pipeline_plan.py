"""What a ``pipeline:`` block (:mod:`schedsim.spec.pipeline_block`, its schema) means: its action order per rank
(:func:`plan_of`, from :mod:`schedsim.pipeline`'s generators, a custom order or a torch CSV), the cost of a stage
(:func:`stage_cost`) and the :class:`~schedsim.graph.info.PipelineInfo` a lowered program carries
(:func:`block_info`). :mod:`schedsim.lower.pipeline` emits the ops from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedsim.errors import SchedsimError, SpecError
from schedsim.graph.info import ActionTexts, PipelineInfo
from schedsim.spec.pipeline_block import PipelineSpec, _act_memory_per_layer, _params_per_layer, _transformer_stage
from schedsim.units import DTYPE_BYTES

if TYPE_CHECKING:
    import numpy as np

    from schedsim.spec.model import ScheduleSpec

__all__ = ["PipelinePlan", "StageCost", "pipeline_block", "plan_of", "stage_cost", "block_info", "split_fix",
           "block_error"]


# ---------------------------------------------------------------- what a block means: its order, costs and info
def split_fix(message: str, *, custom: bool) -> tuple[str, str]:
    """Split a pipeline library message into (what is wrong, one fix line in YAML terms).

    The library's messages end in ``fix: ...`` aimed at Python callers (``format='compute_comms'``); a
    schedule file has no such argument, so those fixes are restated for the ``pipeline:`` block.
    """
    import re

    fix = ("give each rank its compute actions in torch notation (0F0, 1B3, 2I0, 2W0); schedsim adds the "
           "sends and recvs" if custom else "check schedule, p, m, v and group_size")
    m = re.search(r"(?:;|\(|\.)?\s*\(?fix: (.*?)\)?\s*$", message, re.S)
    if m is None:
        return message, fix
    head, lib_fix = message[:m.start()].rstrip(" ;,("), m.group(1).strip()
    if "format=" in lib_fix:
        lib_fix = ("drop the SEND/RECV cells: give a compute-only CSV (schedsim adds the p2p the way torch's "
                   "_add_send_recv does)")
    elif "parse_order" in lib_fix or "stage_to_rank" in lib_fix:
        lib_fix = fix
    return head, lib_fix


def block_error(spec: ScheduleSpec, msg: str, path: str, fix: str) -> SpecError:
    return SpecError(msg, file=spec._file, path=path, fix=fix)



def pipeline_block(spec: ScheduleSpec) -> PipelineSpec:
    """The spec's ``pipeline:`` block (validated as a :class:`PipelineSpec` when the spec was)."""
    pb = spec.pipeline
    assert isinstance(pb, PipelineSpec)
    return pb


@dataclass
class OrderCols:
    """A compute-only order as columns, rank-major, idle slots included (one row per step of each rank).

    ``rank``, ``typ`` (0..3: F, I, B, W; -1 an idle step), ``stage``, ``mb``: int64 arrays of one length;
    ``counts``: steps per rank; ``texts``: per rank its actions' torch notation (idle steps left out), made on
    first read (:class:`schedsim.graph.info.ActionTexts`).
    """

    rank: np.ndarray
    typ: np.ndarray
    stage: np.ndarray
    mb: np.ndarray
    counts: list[int]
    texts: Mapping[int, list[str]]


@dataclass
class PipelinePlan:
    """The validated compute order of a block and where its stages run.

    ``order`` (rank -> actions) is parsed on first use of :meth:`actions` when the order came as columns
    (``cols``, from inline custom actions in canonical notation), or generated then (``source`` a function:
    a built-in schedule whose columns are computed directly).
    """

    name: str
    p: int
    m: int
    v: int
    num_stages: int
    s2r: dict[int, int]
    order: dict[int, list[Any]] | None
    mode: str = ""
    cols: OrderCols | None = None
    source: Any = None
    torch_rules: bool = False  # interleaved 1F1B named as torch names it: torch's group size, order and p2p

    def actions(self) -> dict[int, list[Any]]:
        """The order as per-rank action lists (None = an idle step)."""
        if self.order is None:
            from schedsim.pipeline import parse_order

            self.order = self.source() if callable(self.source) else parse_order(self.source)
        return self.order


_BLANK = bytes.maketrans(b"FIBW_.", b"      ")


def _byte_tables() -> tuple[np.ndarray, bytes]:
    """Per byte value: its kind (0..3 for F, I, B, W; -1 for an idle step ``_`` or ``.``; -9 for anything
    else), and a :meth:`bytes.translate` table to its class (0 a digit, 1 one of F/I/B/W, 2 an idle mark, 3 a
    space, 4 anything else)."""
    import numpy as np

    kind = np.full(256, -9, np.int64)
    kind[list(b"FIBW_.")] = (0, 1, 2, 3, -1, -1)
    cls = bytearray(b"\x04" * 256)
    for chars, k in ((b"0123456789", 0), (b"FIBW", 1), (b"_.", 2), (b" ", 3)):
        for x in chars:
            cls[x] = k
    return kind, bytes(cls)


def _canonical(u: np.ndarray, c: np.ndarray) -> bool:
    """Whether the bytes ``u`` (tokens joined by single spaces, none leading or trailing) are all actions in
    canonical notation (``<stage><F|I|B|W><microbatch>``, decimal numbers without leading zeros) or idle
    steps (``_``, ``.``): the regular expression ``(((0|[1-9][0-9]*)[FIBW](0|[1-9][0-9]*)|[_.])( |$))*`` on
    arrays. With the digits left out, such a line alternates one mark (a letter or an idle step) and one
    space; a letter has digits on both sides and an idle mark spaces. ``c``: the bytes' classes
    (:func:`_byte_tables`)."""
    n = len(c)
    if not n:
        return True
    if bool((c == 4).any()):
        return False
    marks = c[c != 0]
    if len(marks) % 2 == 0 or bool((marks[1::2] != 3).any()) or bool((marks[0::2] == 3).any()):
        return False  # not one mark per token, or a token of digits only
    if c[0] == 1 or c[-1] == 1 or (n > 1 and ((c[0] == 2 and c[1] != 3) or (c[-1] == 2 and c[-2] != 3))):
        return False
    mid, before, after = c[1:-1], c[:-2], c[2:]
    if bool(((mid == 1) & ((before != 0) | (after != 0))).any()):
        return False  # a letter without digits on both sides
    if bool(((mid == 2) & ((before != 3) | (after != 3))).any()):
        return False  # an idle mark inside a token
    if (u[0] == ord("0") and n > 1 and c[1] == 0) or bool(((u[1:-1] == ord("0")) & (before != 0) & (after == 0)).any()):
        return False  # a number with a leading zero
    return True


def _order_cols(actions: Any, p: int) -> OrderCols | None:
    """Inline actions (``{rank: "0F0 0F1 _ 0B0"}``) as columns without making an Action per step; None when
    any token is not a plain F/I/B/W in canonical notation (or an idle step), or the ranks are not 0..p-1:
    :func:`schedsim.pipeline.parse_order` then reads (and rejects) the order as before. Every rank's tokens
    are checked and parsed at once, as the bytes of one line."""
    import numpy as np

    if not isinstance(actions, dict):
        return None
    rows: dict[int, Any] = {}
    for key, row in actions.items():
        if not isinstance(row, str) or not (isinstance(key, int) or (isinstance(key, str) and key.isdigit())):
            return None
        rows[int(key)] = row
    if sorted(rows) != list(range(p)) or len(rows) != len(actions):
        return None
    counts, lines, raw = [], [], {}
    for r in range(p):
        row = rows[r]
        line = row.replace(",", " ") if "," in row else row
        if line[:1] != " " and line[-1:] != " " and "  " not in line and line.isprintable():
            # white space only single spaces (tabs and the like are not printable): the tokens lie between them
            counts.append(line.count(" ") + 1 if line else 0)
            lines.append(line)
            raw[r] = line
            continue
        toks = line.split()
        counts.append(len(toks))
        lines.append(" ".join(toks))
        raw[r] = lines[-1]
    b = " ".join(filter(None, lines)).encode()
    u = np.frombuffer(b, np.uint8)
    kind_of, cls_of = _byte_tables()
    if not _canonical(u, np.frombuffer(b.translate(cls_of), np.uint8)):
        return None
    typ = kind_of[np.frombuffer(b.translate(None, b"0123456789 "), np.uint8)]  # the letters and idle marks
    busy = typ >= 0
    nb = int(busy.sum())
    sm = np.fromstring(b.translate(_BLANK), dtype=np.int64, sep=" ") if nb else np.zeros(0, np.int64)
    if len(sm) != 2 * nb or len(typ) != sum(counts):
        return None
    sm = sm.reshape(-1, 2)
    stage = np.full(len(typ), -1, np.int64)
    mb = np.full(len(typ), -1, np.int64)
    stage[busy], mb[busy] = sm[:, 0], sm[:, 1]
    return OrderCols(np.repeat(np.arange(p), counts), typ, stage, mb, counts, ActionTexts(partial(_texts, raw), raw))


def _texts(lines: dict[int, str]) -> dict[int, list[str]]:
    """Per rank the actions of its line (canonical steps joined by single spaces), idle steps left out."""
    return {r: (" " + x).replace(" _", "").replace(" .", "").split() if "_" in x or "." in x else x.split()
            for r, x in lines.items()}


def _texts_of_cols(c: OrderCols, ranks: list[int]) -> dict[int, list[str]]:
    """Per rank (keys in the order of ``ranks``, each a rank of ``c``) its actions in torch's notation
    (``<stage><F|I|B|W><microbatch>``, as ``str(Action)``), idle steps left out: one concatenation per action
    of interned stage, type and microbatch strings."""
    import numpy as np

    busy = np.flatnonzero(c.typ >= 0)
    if not len(busy):
        return {r: [] for r in ranks}
    st, mb = c.stage[busy], c.mb[busy]
    st_s = np.array([str(x) for x in range(int(st.max()) + 1)], dtype=object)
    mb_s = np.array([str(x) for x in range(int(mb.max()) + 1)], dtype=object)
    ty_s = np.array(["F", "I", "B", "W"], dtype=object)  # ComputationType's values, type codes 0..3
    flat = (st_s[st] + ty_s[c.typ[busy]] + mb_s[mb]).tolist()
    n = np.bincount(c.rank[busy], minlength=len(c.counts)).tolist()
    start = [0]
    for k in n:
        start.append(start[-1] + k)
    return {r: flat[start[r]:start[r + 1]] for r in ranks}


def _cols_of_order(order: dict[int, list[Any]], p: int) -> OrderCols | None:
    """A generated order (per-rank lists of F/I/B/W actions and idle ``None`` steps) as columns; None when it
    holds anything else (DualPipe's overlapped pairs, p2p) or its ranks are not 0..p-1."""
    import numpy as np

    from schedsim.pipeline.actions import Action
    from schedsim.pipeline.actions import ComputationType as CT

    if sorted(order) != list(range(p)):
        return None
    code = {CT.F: 0, CT.I: 1, CT.B: 2, CT.W: 3}
    typ: list[int] = []
    stage: list[int] = []
    mb: list[int] = []
    counts: list[int] = []
    for r in range(p):
        acts = order[r]
        counts.append(len(acts))
        for a in acts:
            if a is None:
                typ.append(-1)
                stage.append(-1)
                mb.append(-1)
            elif type(a) is Action and a.type in code and a.microbatch is not None:
                typ.append(code[a.type])
                stage.append(a.stage)
                mb.append(a.microbatch)
            else:
                return None
    i64 = np.int64
    return OrderCols(np.repeat(np.arange(p), counts), np.array(typ, i64), np.array(stage, i64), np.array(mb, i64),
                     counts, {})


def _cols_valid(c: OrderCols, p: int, m: int, num_stages: int, s2r: dict[int, int]) -> bool:
    """True when :func:`schedsim.pipeline.validate` (checks 1, 3 and 4; no p2p, no schedule) accepts the
    order; False sends the order to it for the error."""
    import numpy as np

    busy = np.flatnonzero(c.typ >= 0)
    t, st, j = c.typ[busy], c.stage[busy], c.mb[busy]
    if len(busy) == 0 or st.max() >= num_stages or j.max() >= m:
        return False
    where = np.array([s2r.get(x, -1) for x in range(num_stages)], np.int64)
    if (where[st] != c.rank[busy]).any():
        return False
    pos = np.full((4, num_stages, m), -1, np.int64)
    pos[t, st, j] = busy
    if (pos[t, st, j] != busy).any():  # an action twice
        return False
    f, i, b, w = pos
    has_i, has_w = i >= 0, w >= 0
    return bool((f >= 0).all() and (has_i != (b >= 0)).all() and (has_i == has_w).all()
                and (i[has_i] > f[has_i]).all() and (b[b >= 0] > f[b >= 0]).all() and (w[has_w] > i[has_w]).all())


def _custom_order(spec: ScheduleSpec, pb: PipelineSpec, reference: bool = False) -> PipelinePlan:
    """The order of ``schedule: custom`` (a CSV or inline actions), its stage count and placement."""
    from schedsim.pipeline import parse_order, read_csv, stage_to_rank

    p = pb.p
    if pb.csv is None and not reference:
        fast = _custom_cols(pb)
        if fast is not None:
            return fast
    where = "pipeline.csv" if pb.csv is not None else "pipeline.actions"
    if pb.csv is not None:
        base = Path(spec._file).parent if spec._file and spec._file != "<schedule>" else Path(".")
        try:
            order = read_csv(base / pb.csv, format="compute_comms")  # SEND/RECV cells: issued as written
        except SchedsimError as e:  # missing, not a regular file, too large, not UTF-8 (schedsim.io)
            raise block_error(spec, f"cannot read pipeline csv: {e.message}", "pipeline.csv",
                              e.fix or "give a torch pipeline CSV path relative to the schedule file") from None
    else:
        order = parse_order(pb.actions or {})  # type: ignore[arg-type]
    stages = sorted({sub.stage for acts in order.values() for a in acts if a is not None for sub in a.sub_actions})
    num_stages = len(stages)
    if num_stages >= p and stages == list(range(num_stages)) and num_stages % p:
        raise block_error(spec, f"the custom actions run {num_stages} stages, which do not split evenly over p={p} "
                   "ranks (every rank runs v stages: placement loop or v)", where,
                   f"give the actions {num_stages - num_stages % p} or {num_stages + p - num_stages % p} "
                   f"stages, or set p to a divisor of {num_stages}")
    if num_stages < p or stages != list(range(num_stages)):
        raise block_error(spec, f"the custom actions run stages {stages[:8]}{'…' if len(stages) > 8 else ''}; "
                   f"a pipeline of p={p} needs stages 0..N-1 with N >= p", "pipeline.actions",
                   "give every rank its F/B (or I/W) actions, e.g. {0: '0F0 0B0', 1: '1F0 1B0'}")
    v = max(1, num_stages // p)
    s2r = stage_to_rank(pb.placement or "loop", p, v)
    if pb.placement is None and v > 1:
        _refuse_unstated_v(spec, order, p, v, num_stages, s2r, where)
    return PipelinePlan("custom", p, pb.m, v, num_stages, s2r, order)


def _custom_cols(pb: PipelineSpec) -> PipelinePlan | None:
    """:func:`_custom_order` on columns, for inline actions every check of which passes; None otherwise (the
    per-action path then reads the order and raises its errors)."""
    import numpy as np

    from schedsim.pipeline import stage_to_rank

    p = pb.p
    c = _order_cols(pb.actions, p)
    if c is None:
        return None
    run = c.stage[c.typ >= 0]
    if not len(run) or int(run.max()) >= len(run):
        return None  # stages that cannot be 0..N-1: the per-action path words it
    stages = np.flatnonzero(np.bincount(run))  # the stages run, ascending
    num_stages = len(stages)
    if num_stages < p or num_stages % p or (num_stages and stages[-1] != num_stages - 1):
        return None
    v = max(1, num_stages // p)
    s2r = stage_to_rank(pb.placement or "loop", p, v)
    if pb.placement is None and v > 1:
        busy = c.typ >= 0
        first = np.full(num_stages, -1, np.int64)
        first[c.stage[busy][::-1]] = c.rank[busy][::-1]  # the first rank (in rank order) that runs each stage
        one_rank = bool((first[c.stage[busy]] == c.rank[busy]).all())
        vmap = stage_to_rank("v", p, v)
        if one_rank and any(first[k] != s2r[k] for k in range(num_stages)) and \
                all(first[k] == vmap[k] for k in range(num_stages)):
            return None  # the V placement written without `placement: v`: refused by the per-action path
    return PipelinePlan("custom", p, pb.m, v, num_stages, s2r, None, cols=c, source=pb.actions)


def _refuse_unstated_v(spec: ScheduleSpec, order: dict[int, list[Any]], p: int, v: int, num_stages: int,
                       s2r: dict[int, int], where: str) -> None:
    """Custom actions that place the stages in a V while ``placement`` defaults to loop are an error."""
    from schedsim.pipeline import stage_to_rank
    from schedsim.pipeline.comms import infer_stage_to_rank

    try:
        seen = infer_stage_to_rank(order)
    except ValueError:
        seen = None
    vmap = stage_to_rank("v", p, v)
    if seen is not None and seen != {k: s2r[k] for k in seen} and seen == {k: vmap[k] for k in seen}:
        raise block_error(spec, f"these actions place the stages in a V (rank 0 runs stages 0 and {num_stages - 1}, "
                   f"as ZB-V and DualPipeV do), but placement defaults to loop (rank 0 runs stages "
                   f"0, {p}, ...)", where, "set placement: v in the pipeline block")


def _interleaved_plan(pb: PipelineSpec, info: Any, v: int, s2r: dict[int, int]) -> PipelinePlan:
    """The plan of the built-in interleaved 1F1B from its columns
    (:func:`schedsim.pipeline.schedules_1f1b.interleaved_1f1b_cols`, which raises the generator's errors); its
    Action lists are generated only when read."""
    from schedsim.pipeline.schedules_1f1b import interleaved_1f1b_cols

    rank, typ, stage, mb = interleaved_1f1b_cols(pb.p, pb.m, v, group_size=pb.group_size)
    cols = OrderCols(rank, typ, stage, mb, [2 * v * pb.m] * pb.p, {})
    cols.texts = ActionTexts(lambda: _texts_of_cols(cols, list(range(pb.p))))
    return PipelinePlan(info.name, pb.p, pb.m, v, pb.p * v, s2r, None, cols=cols,
                        source=lambda: info.generate(pb.p, pb.m, v, group_size=pb.group_size))


def _torch_interleaved_plan(pb: PipelineSpec, info: Any, v: int, s2r: dict[int, int],
                            reference: bool) -> PipelinePlan:
    """The plan of ``schedule: Interleaved1F1B`` (torch's name): what torch's ``ScheduleInterleaved1F1B``
    accepts and runs (``torch/distributed/pipelining/schedules.py``; pytorch PR 129597, "flexible PP"):
    ``rounds = max(1, m // p)`` microbatch groups of ``m // rounds`` (:func:`schedsim.pipeline.torch_group_size`,
    which raises torch's error when ``m % rounds != 0``), any ``m >= 1`` (torch has no ``m >= p`` check for
    it: p = 4 runs m = 3, 6 and 10), its order (the Megatron table with that group size,
    ``tests/pipeline/test_pipeline_torch_parity.py``) and, in the lowering, torch's sends and recvs
    (``_add_send_recv``)."""
    from schedsim.pipeline import torch_group_size

    g = pb.group_size if pb.group_size is not None else torch_group_size(pb.p, pb.m)
    order = info.generate(pb.p, pb.m, v, group_size=g, check_microbatches=False)
    plan = PipelinePlan(info.name, pb.p, pb.m, v, pb.p * v, s2r, order, torch_rules=True)
    if not reference:
        plan.cols = _cols_of_order(order, pb.p)
    return plan


def plan_of(spec: ScheduleSpec, pb: PipelineSpec, *, reference: bool = False, megatron: bool = False) -> PipelinePlan:
    """Generate (or read) and validate the compute order; every rejection becomes a one-fix error.

    With ``reference``, inline custom actions are parsed and checked one Action at a time (the path the
    columnar one is tested against). With ``megatron`` (the ``training:`` block), 1F1B follows Megatron-LM's
    ``forward_backward_pipelining_without_interleaving``, which runs any m >= 1 (``num_warmup_microbatches =
    min(pp - rank - 1, num_microbatches)``), instead of torch ``Schedule1F1B``'s m >= p.
    """
    from schedsim.pipeline import get_schedule, stage_to_rank, validate

    try:
        if pb.schedule == "custom":
            plan = _custom_order(spec, pb, reference)
        else:
            info = get_schedule(pb.schedule)
            v = info.chunks(pb.v)
            if info.name == "interleaved_1f1b" and pb.p == 1 and v > 1:
                raise block_error(spec, f"interleaved_1f1b with p=1 puts all {v} chunks on rank 0, so every activation "
                                  "and gradient would be sent by rank 0 to itself", "pipeline.p",
                                  "set p >= 2, or use schedule: 1f1b (one rank's chunks are one stage)")
            s2r = info.stage_to_rank(pb.p, v) if pb.placement is None else stage_to_rank(pb.placement, pb.p, v)
            if info.name == "interleaved_1f1b" and pb.schedule == info.torch_name:
                plan = _torch_interleaved_plan(pb, info, v, s2r, reference)
            elif not reference and info.name == "interleaved_1f1b" and pb.m >= info.min_microbatches(pb.p, v):
                plan = _interleaved_plan(pb, info, v, s2r)
            else:
                order = info.generate(pb.p, pb.m, v, group_size=pb.group_size,
                                      check_microbatches=not (megatron and info.name == "1f1b"))
                plan = PipelinePlan(info.name, pb.p, pb.m, v, pb.p * v, s2r, order)
                if not reference and pb.m >= info.min_microbatches(pb.p, v):
                    plan.cols = _cols_of_order(order, pb.p)
        megatron_m = megatron and plan.name == "1f1b" and plan.m < plan.p  # Megatron's rule, not torch's m >= p
        # cross-rank p2p wait cycles are found by the DAG's rendezvous check (with this grid attached)
        if plan.cols is None or not _cols_valid(plan.cols, plan.p, plan.m, plan.num_stages, plan.s2r):
            validate(plan.actions(), plan.p, plan.m, plan.num_stages, plan.s2r,
                     schedule=None if plan.name == "custom" or plan.torch_rules or megatron_m else plan.name,
                     check_p2p=False)
            plan.cols = None  # accepted all the same: the per-action paths take it from here
    except ValueError as e:
        if isinstance(e, SchedsimError):
            if e.fix is None and "fix" not in e.message:  # a rejection always says what to do
                e.fix = ("give each stage one F and one B (or I then W) per microbatch 0..m-1, on the rank its "
                         "placement puts it" if pb.schedule == "custom" else "check schedule, p, m, v and group_size")
                e.args = (SchedsimError.format(e),)  # the schedule language's layout: fix on its own line
            raise
        msg, fix = split_fix(str(e), custom=pb.schedule == "custom")
        raise block_error(spec, msg, "pipeline.csv" if pb.csv is not None else "pipeline", fix) from None
    plan.mode = pb.p2p or ("batched" if plan.name == "1f1b" else "overlapped")
    return plan


@dataclass
class StageCost:
    """Per-stage op lists and the sizes the block derives from its model.

    ``params_stage``: parameters of one stage's transformer layers; ``params``: per stage, every parameter it
    holds (its layers, the word and position embedding on the first stage, the final LayerNorm and the output
    layer on the last: :func:`schedsim.spec.pipeline_block.stage_params`), empty without a ``transformer``;
    ``emb_bytes``: the word embedding's bytes (V·h·element size), what the tied-embedding all-reduce moves;
    ``stage_mem_bytes``: per stage, the activations its chunk stores per microbatch where the stages differ
    (empty: every stage stores ``mem_bytes``; :attr:`PipelineInfo.stage_activation_memory_bytes`).
    """

    templates: dict[int, dict[str, list[dict[str, Any]]]]
    act_bytes: int
    mem_bytes: int
    params_stage: int = 0
    emb_bytes: int = 0
    dtype: str = "fp16"
    params: dict[int, int] = field(default_factory=dict)
    stage_mem_bytes: dict[int, int] = field(default_factory=dict)

    def rank_params(self, s2r: Mapping[int, int], rank: int) -> int:
        """Parameters held by the stages ``s2r`` places on ``rank`` (0 without a ``transformer``)."""
        return sum(n for st, n in self.params.items() if s2r[st] == rank)


def stage_cost(spec: ScheduleSpec, pb: PipelineSpec, num_stages: int) -> StageCost:
    """Stage op lists from ``transformer`` (Megatron-LM's layer) or ``stage`` (given), and the sizes."""
    t = pb.transformer
    if t is None:
        st = pb.stage
        assert st is not None
        tmpl = {"F": st.forward, "I": st.backward_input, "W": st.backward_weight}
        act = pb.activation_bytes if pb.activation_bytes is not None else 0
        mem = pb.activation_memory_bytes if pb.activation_memory_bytes is not None else act
        return StageCost({s: tmpl for s in range(num_stages)}, act, mem)
    if t.layers % num_stages:
        raise block_error(spec, f"{t.layers} layers do not split evenly over {num_stages} stages",
                   "pipeline.transformer.layers", f"use a multiple of p·v = {num_stages}")
    from schedsim.spec.pipeline_block import stage_params

    lps = t.layers // num_stages
    e = DTYPE_BYTES[t.dtype]
    held = stage_params(num_stages, lps, _params_per_layer(t), hidden=t.hidden, seq=t.seq, vocab=t.vocab)
    return StageCost(
        {s: _transformer_stage(t, lps, s == 0, s == num_stages - 1) for s in range(num_stages)},
        pb.activation_bytes if pb.activation_bytes is not None else t.seq * t.micro_batch * t.hidden * e,
        pb.activation_memory_bytes if pb.activation_memory_bytes is not None else lps * _act_memory_per_layer(t),
        lps * _params_per_layer(t), (t.vocab or 0) * t.hidden * e, t.dtype,
        {s: sum(d.values()) for s, d in held.items()})


def block_info(pb: PipelineSpec, plan: PipelinePlan, cost: StageCost) -> PipelineInfo:
    """What the Program's ``pipeline`` (in JSON form ``G.graph["pipeline"]`` and the timeline's meta) says
    about the block."""
    t = pb.transformer
    memory = None
    if t is not None:
        from schedsim.pipeline.memory import static_memory
        from schedsim.spec.pipeline_block import stage_params

        ns = plan.num_stages
        memory = static_memory(stage_params(ns, t.layers // ns, _params_per_layer(t), hidden=t.hidden,
                                            seq=t.seq, vocab=t.vocab), plan.s2r)
    if plan.cols is not None and plan.order is None:
        texts = plan.cols.texts
    elif plan.cols is not None:  # a generated order with a column form: its notation formatted in bulk
        texts = _texts_of_cols(plan.cols, list(plan.actions()))
    else:
        texts = {r: [str(a) for a in acts if a is not None] for r, acts in plan.actions().items()}
    return PipelineInfo(schedule=plan.name, p=plan.p, m=plan.m, v=plan.v, num_stages=plan.num_stages,
                        dp=pb.data_parallel, static_memory=memory,
                        stage_to_rank={int(k): int(val) for k, val in plan.s2r.items()}, p2p=plan.mode,
                        activation_bytes=cost.act_bytes, activation_memory_bytes=cost.mem_bytes,
                        order=texts,  # type: ignore[arg-type]  # an ActionTexts: a Mapping equal to the dict
                        stage_activation_memory_bytes=dict(cost.stage_mem_bytes))

