"""Bound the work a schedule asks for *before* expanding it.

A few lines of YAML can ask for billions of ops (``foreach: {i: range(3000),
j: range(3000)}``, ``pipeline: {m: 1000000}``, ``world_size: 10000000``). The
loader calls :func:`check_expansion` on the raw document, after ``params`` are
resolved but before any ``foreach`` is expanded, any ``range`` is built or the
pipeline block is expanded. It estimates, without building them:

* **ops**: op instances summed over ranks. Each hand-written op counts once per
  rank it runs on (``ranks`` omitted or ``all``: ``world_size``) times the
  product of the lengths of the enclosing ``foreach`` loops (``when``
  conditions are not evaluated, so this is an upper bound, and also the number
  of times the expander visits the op). A pipeline block counts
  ``p · data_parallel · v · m · 3 · (stage ops + 2)``: F, I and W actions of every
  microbatch and virtual stage on every rank, each with its stage ops and up to
  two send/recv.
* **ranks**: ``world_size``.
* **streams** per rank: literal stream names once each, a stream name holding
  ``{expr}`` once per iteration of its loops (5,000 streams are fine to
  simulate; the Gantt chart caps its lanes).
* **characters**: for each op, the estimate of its instances times the length
  of its longest string field (the expanded names and streams held in memory).

Past a limit the loader raises :class:`~schedsim.errors.SpecError` (exit 2)
with the estimate and the knob that raises the limit. Limits come from the
environment, so they reach every rank under torchrun; ``--max-ops`` of
``predict``/``check``/``sweep`` sets ``SCHEDSIM_MAX_OPS``.

========================  =================  ==============================
limit                     default            knob
========================  =================  ==============================
op instances              2,000,000          ``--max-ops N`` / ``SCHEDSIM_MAX_OPS``
ranks (``world_size``)    100,000            ``SCHEDSIM_MAX_RANKS``
characters                200,000,000        ``SCHEDSIM_MAX_CHARS``
streams per rank          100,000            ``SCHEDSIM_MAX_STREAMS``
trace events kept         10,000,000         ``SCHEDSIM_MAX_TRACE_EVENTS`` (GPU activities, ranges;
                                             per kind, per import)
YAML nesting depth        64                 (fixed; write ops flat)
========================  =================  ==============================

The defaults keep a run within minutes and a few GB on one CPU core: the
simulator handles about 10^5 ops/s (``benchmarks/speed/speed_goals.py --cases throughput``), and a
timeline costs about 600 B per op in memory.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from schedsim.errors import SpecError
from schedsim.io import WORK_LIMITS as DEFAULTS  # re-exported
from schedsim.io import work_limit as limit  # re-exported

__all__ = ["DEFAULTS", "MAX_YAML_DEPTH", "limit", "check_expansion", "estimate_ops", "estimate_streams"]

#: Deepest nesting of YAML mappings/lists a schedule may use (PyYAML and the loader recurse per level).
MAX_YAML_DEPTH = 64

_KNOB = {
    "SCHEDSIM_MAX_OPS": "--max-ops {n} (or the environment variable SCHEDSIM_MAX_OPS={n})",
    "SCHEDSIM_MAX_RANKS": "the environment variable SCHEDSIM_MAX_RANKS={n}",
    "SCHEDSIM_MAX_CHARS": "the environment variable SCHEDSIM_MAX_CHARS={n}",
    "SCHEDSIM_MAX_STREAMS": "the environment variable SCHEDSIM_MAX_STREAMS={n}",
    "SCHEDSIM_MAX_TRACE_EVENTS": "the environment variable SCHEDSIM_MAX_TRACE_EVENTS={n}",
}


def _refuse(file: str, what: str, est: int, name: str, path: str | None = None) -> SpecError:
    lim = limit(name)
    return SpecError(
        f"{what}: about {est:,}, past the limit of {lim:,} (estimated before expanding)", file=file, path=path,
        fix="make the loops or sizes smaller; if you mean it, raise the limit with "
        + _KNOB[name].format(n=est))


def _length(spec: Any, env: Mapping[str, Any]) -> int | None:
    """Length of a foreach loop spec without building it; None if it cannot be told (the expander reports it)."""
    from schedsim.expr import ExprError, evaluate

    if isinstance(spec, list):
        return len(spec)
    if isinstance(spec, bool):
        return None
    if isinstance(spec, int):
        return max(spec, 0)
    if not isinstance(spec, str):
        return None
    try:
        tree = ast.parse(spec.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    try:
        if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "range" \
                and not tree.keywords and 1 <= len(tree.args) <= 3:
            args = [evaluate(ast.unparse(a), env) for a in tree.args]
            if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
                try:
                    return len(range(*args))
                except (ValueError, OverflowError):
                    return None
            return None
        val = evaluate(spec, env)
    except ExprError:
        return None
    if isinstance(val, list):
        return len(val)
    if isinstance(val, int) and not isinstance(val, bool):
        return max(val, 0)
    return None


def _ends(spec: Any, env: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """First and last value of a loop spec without building it (None if unknown or empty)."""
    from schedsim.expr import ExprError, evaluate

    if isinstance(spec, list):
        return (spec[0], spec[-1]) if spec else None
    if isinstance(spec, int) and not isinstance(spec, bool):
        return (0, spec - 1) if spec > 0 else None
    if not isinstance(spec, str):
        return None
    try:
        tree = ast.parse(spec.strip(), mode="eval").body
        if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "range" \
                and not tree.keywords and 1 <= len(tree.args) <= 3:
            args = [evaluate(ast.unparse(a), env) for a in tree.args]
            r = range(*args)
            return (r[0], r[-1]) if len(r) else None
    except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError, MemoryError, ExprError):
        return None
    return None


def _loop_mult(loops: Any, lo: Mapping[str, Any], hi: Mapping[str, Any]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Iterations of one foreach (the larger of its length with outer loop variables at their first and at
    their last values, so that ``range(i)`` under ``i: range(n)`` counts n), and the environments of its body
    with its own variables at their first / last values."""
    mult = 1
    lo2, hi2 = dict(lo), dict(hi)
    if isinstance(loops, Mapping):
        for var, spec in loops.items():
            ns = [n for n in (_length(spec, lo), _length(spec, hi)) if n is not None]
            mult *= max(ns) if ns else 1
            ends = _ends(spec, hi) or _ends(spec, lo)
            if ends is not None and isinstance(var, str):
                lo2[var], hi2[var] = ends
    return mult, lo2, hi2


def _ranks_of(item: Mapping[str, Any], world: int) -> int:
    r = item.get("ranks")
    if isinstance(r, list):
        return len(r)
    if r is None or r == "all":
        return world
    return 1


def _longest_str(item: Mapping[str, Any]) -> int:
    return max((len(v) for v in item.values() if isinstance(v, str)), default=0)


def estimate_ops(items: Any, env: Mapping[str, Any], world: int,
                 hi: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """Upper bounds of (op instances, characters) of an ``ops`` list, without expanding it.

    Parameters
    ----------
    items : list
        The raw ``ops`` list (foreach blocks unexpanded).
    env : mapping
        Parameters visible to loop ranges, with the loop variables of outer loops at their first values.
        A range that depends on an outer loop variable is measured with that variable at its first and at
        its last value (``hi``) and the larger length counts: exact for ranges monotone in the outer variable
        (``range(i)``, ``range(n - i)``); the expander counts what it really builds and refuses past the same
        limits, so a non-monotone range cannot slip through either.
    world : int
        ``world_size``.
    hi : mapping, optional
        ``env`` with outer loop variables at their last values (default: ``env``).
    """
    hi = env if hi is None else hi
    ops = chars = 0
    if not isinstance(items, list):
        return 0, 0
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if "foreach" in item:
            mult, lo2, hi2 = _loop_mult(item.get("foreach"), env, hi)
            o, c = estimate_ops(item.get("ops"), lo2, world, hi2)
            ops += mult * max(o, 1)
            chars += mult * c
        elif isinstance(item.get("ops"), list):  # a group of ops under one `when:`
            o, c = estimate_ops(item["ops"], env, world, hi)
            ops += o
            chars += c
        else:
            n = _ranks_of(item, world)
            ops += n
            chars += n * _longest_str(item)
    return ops, chars


def estimate_streams(items: Any, env: Mapping[str, Any], mult: int = 1, hi: Mapping[str, Any] | None = None) -> int:
    """Upper bound of the streams of one rank: literal stream names count once, a stream name holding
    ``{expr}`` counts once per iteration of its enclosing loops. Default streams count as one."""
    hi = env if hi is None else hi
    if not isinstance(items, list):
        return 0
    literal: set[str] = set()
    templated = 0
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if "foreach" in item:
            m, lo2, hi2 = _loop_mult(item.get("foreach"), env, hi)
            templated += estimate_streams(item.get("ops"), lo2, mult * m, hi2)
        elif isinstance(item.get("ops"), list):
            templated += estimate_streams(item["ops"], env, mult, hi)
        else:
            st = item.get("stream")
            if isinstance(st, str) and "{" in st:
                templated += mult
            else:
                literal.add(str(st))
    return len(literal) + templated


def _pipeline_ops(pb: Mapping[str, Any]) -> int:
    def num(v: Any, default: int = 1) -> int:
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default

    p, v, m, dp = num(pb.get("p")), num(pb.get("v")), num(pb.get("m")), num(pb.get("data_parallel"))
    per_stage = 1
    st = pb.get("stage")
    if isinstance(st, Mapping):
        per_stage = max([1] + [len(x) for x in st.values() if isinstance(x, list)])
    t = pb.get("transformer")
    if isinstance(t, Mapping):  # about 16 kernels per layer (the module docstring of schedsim.spec.pipeline_block)
        per_stage = max(per_stage, 16 * -(-num(t.get("layers")) // (p * v)) + 4)
    return p * dp * v * m * 3 * (per_stage + 2)


def _training_ops(tb: Mapping[str, Any], world: int, represented: bool = False) -> int:
    """An upper bound on the op instances of a ``training:`` block (:mod:`schedsim.lower.training`), in closed
    form from its numbers (nothing is lowered): each of the ``world / pp`` pipeline replicas runs, per
    microbatch, every one of the ``num_layers`` layers forward (F), input gradient (I) and weight gradient (W),
    the recomputed forwards, the p2p between its ``v·pp`` stage chunks (4 a microbatch and boundary) and the
    embedding and head (11 ops; tp > 1: 5 TP collectives more, 7 with sequence parallelism), plus per rank the
    step's tail (gradient buckets, at most one a layer of its chunks, each with its scaling pass, the optimizer and
    its passes over the parameters, and with experts their parameter all-gathers).
    ``scatter_gather_tensors_in_pipeline``: 2 ops more a microbatch and boundary (the receivers' all-gathers).

    Ops a layer, a microbatch and a rank (the kernel lists of
    :func:`schedsim.spec.pipeline_block._layer_ops` with :mod:`schedsim.lower.training`'s collectives): F 15, I 22,
    W 5; tp > 1: 3 TP collectives more each of F and I, and 2 all-gathers more with sequence parallelism (I 2
    more again without ``tp_comm_overlap``: the weight gradients' all-gathers of QKV's and fc1's input, one in an
    MoE layer, and the head one more);
    ``use_flash_attn`` (cp = 1): 2 and 4 fewer, else both dropouts 0: 1 and 3 fewer; context parallelism's ring:
    ``4·cp − 8`` more each; ``tp_comm_overlap``: ``14·tp − 18`` more each (chunked GEMMs and ring exchanges); an
    MoE layer of E local experts: F ``3·E + 1``, I ``3·E − 1``, W ``2·E − 1`` more, the all-to-alls 2 more each
    with ep > 1, its TP collectives replacing the MLP's. Recomputation reruns F (``full``; ``block``: the first
    ``recompute_num_layers`` of each chunk) or the attention core (``selective``: 5, or the ring's ``4·cp − 3``).

    ``represented``: the ops of the symmetric lowering (:func:`schedsim.lower.training.represented_ranks`), which
    writes ``pp·cp`` ranks (times tp with ``tp_comm_overlap``, times dp with ``moe_expert_capacity_factor``)."""
    def num(*keys: str, default: int = 1) -> int:
        v = next((tb[k] for k in keys if k in tb), default)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default

    def on(key: str) -> bool:
        return tb.get(key) is True

    tp, pp = num("tensor_model_parallel_size", "tp"), num("pipeline_model_parallel_size", "pp")
    cp, ep, mbs = num("context_parallel_size", "cp"), num("expert_model_parallel_size", "ep"), num("micro_batch_size")
    layers = num("num_layers")
    dp = max(1, world // (tp * pp * cp))
    m = max(1, num("global_batch_size", default=mbs * dp) // (mbs * dp))
    padded = layers - layers % pp + pp if on("allow_padding_num_layers") and layers % pp else layers
    v = max(1, padded // pp // num("num_layers_per_virtual_pipeline_stage", default=padded))
    sp = on("sequence_parallel") and tp > 1
    f, i, w = 15, 22, 5
    regather = sp and not on("tp_comm_overlap")  # the weight gradients' all-gathers of QKV's and fc1's input
    if tp > 1:
        f, i = f + 3 + 2 * sp, i + 3 + 2 * sp + 2 * regather
    if cp > 1:
        f, i = f + 4 * cp - 8, i + 4 * cp - 8
    elif on("use_flash_attn"):
        f, i = f - 2, i - 4
    elif tb.get("attention_dropout", 0.1) == 0 and tb.get("hidden_dropout", 0.1) == 0:
        f, i = f - 1, i - 3
    if on("tp_comm_overlap") and sp:
        f, i = f + 14 * tp - 18, i + 14 * tp - 18
    if "num_experts" in tb:
        e = num("num_experts") // ep
        f, i, w = f + 3 * e + 1 + 2 * (ep > 1), i + 3 * e - 1 + 2 * (ep > 1) - regather, w + 2 * e - 1
    head = 11 + 5 * (tp > 1) + 2 * sp + regather  # embedding and head (module docstring of schedsim.lower.training)
    per_mb = layers * (f + i + w) + head + 4 * (v * pp - 1)  # the replica's layers, head, p2p between chunks
    if on("scatter_gather_tensors_in_pipeline") and tp > 1 and pp > 1 and not sp:
        per_mb += 2 * (v * pp - 1)  # the receivers' TP all-gathers
    rg = tb.get("recompute_granularity")
    if rg == "full":
        rerun = layers if tb.get("recompute_method") != "block" else min(layers, num("recompute_num_layers") * pp * v)
        per_mb += rerun * f
    elif rg == "selective":
        per_mb += layers * max(5, 4 * cp - 3)
    ranks = world
    if represented:
        ranks = pp * cp * (tp if on("tp_comm_overlap") else 1) * \
            (dp if "num_experts" in tb and tb.get("moe_expert_capacity_factor") is not None else 1)
    buckets = (layers // pp + v) * (1 + on("overlap_grad_reduce"))  # with overlap each bucket is scaled too
    # the distributed optimizer's expert all-gathers: one, or one a chunk with overlap_param_gather
    moe = "num_experts" in tb and on("use_distributed_optimizer")
    return ranks // pp * m * per_mb + ranks * (13 + 3 * v + buckets + moe * (1 + v))


def check_training_ops(tb: Mapping[str, Any], world: int, file: str, represented: bool) -> None:
    """Refuse a ``training:`` block whose lowering (symmetric with ``represented``, else of every rank) would
    write more ops than ``SCHEDSIM_MAX_OPS`` (:func:`_training_ops`). The loader checks the symmetric lowering's
    (what ``predict`` runs); the lowering of every rank checks its own before it expands.

    Raises
    ------
    SpecError
        Past the limit, with the estimate and the knob that raises it.
    """
    ops = _training_ops(tb, world, represented)
    if ops > limit("SCHEDSIM_MAX_OPS"):
        raise _refuse(file, "the schedule expands to too many op instances (summed over ranks)"
                      + ("" if represented else " when every rank is lowered"), ops, "SCHEDSIM_MAX_OPS", "training")


def check_expansion(data: Mapping[str, Any], env: Mapping[str, Any], file: str,
                    pipeline: Any = None, training: Any = None) -> dict[str, int]:
    """Estimate the expansion of a schedule document and refuse it past the limits.

    Parameters
    ----------
    data : mapping
        The parsed YAML (``ops`` unexpanded).
    env : mapping
        Resolved parameters, with ``world_size``.
    file : str
        Named in errors.
    pipeline : mapping, optional
        The pipeline block with its numbers evaluated.
    training : mapping, optional
        The training block with its numbers evaluated.

    Returns
    -------
    dict
        ``{"ops": ..., "ranks": ..., "streams": ..., "chars": ...}``, the estimates.

    Raises
    ------
    SpecError
        An estimate is past its limit: the message gives the estimate and the knob that raises it.
    """
    world = env.get("world_size", data.get("world_size", 1))
    world = world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else 1
    if world > limit("SCHEDSIM_MAX_RANKS"):
        raise _refuse(file, "world_size is too large", world, "SCHEDSIM_MAX_RANKS", "world_size")
    ops, chars = estimate_ops(data.get("ops"), env, world)
    if isinstance(pipeline, Mapping):
        ops += _pipeline_ops(pipeline)
    if isinstance(training, Mapping):
        ops += _training_ops(training, world, represented=True)  # the full lowering checks its own
    if ops > limit("SCHEDSIM_MAX_OPS"):
        raise _refuse(file, "the schedule expands to too many op instances (summed over ranks)", ops,
                      "SCHEDSIM_MAX_OPS", "ops" if "ops" in data else "training" if training is not None else
                      "pipeline")
    streams = estimate_streams(data.get("ops"), env)
    if streams > limit("SCHEDSIM_MAX_STREAMS"):
        raise _refuse(file, "the schedule uses too many streams per rank", streams, "SCHEDSIM_MAX_STREAMS", "ops")
    if chars > limit("SCHEDSIM_MAX_CHARS"):
        raise _refuse(file, "the expanded op names and strings are too long in total (characters)", chars,
                      "SCHEDSIM_MAX_CHARS", "ops")
    return {"ops": ops, "ranks": world, "streams": streams, "chars": chars}
