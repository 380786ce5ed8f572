"""Fuzz: random YAML structure, expressions and trace events never give a traceback.

Each generated input must either load (and, for schedules, build and simulate) or raise a
:class:`~schedsim.errors.SchedsimError`; any other exception is a bug. Everything runs in process; a SIGALRM
hang guard per test (30 s, from test_hostile) stops a hang, and the example counts keep the whole file to a few seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile import hang_guard

from schedsim.errors import SchedsimError
from schedsim.expr import ExprError, evaluate

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


# -- expressions ---------------------------------------------------------------------------------------------
_ATOMS = ["0", "1", "-1", "7", "2.5", "1e300", "'a'", "'ab'", "i", "n", "[1, 2]", "[]", "range(3)", "range(n)",
          "range(9999999)", "True", "None", "x", "sizeof('fp16')", "sizeof('zz')", "min(1, 2)", "max()", "len('abc')"]
_BIN = ["+", "-", "*", "/", "//", "%", "**", "==", "<", " in ", " and ", " or "]


def _expr_strategy() -> st.SearchStrategy[str]:
    atom = st.sampled_from(_ATOMS)
    return st.recursive(
        atom,
        lambda sub: st.one_of(
            st.tuples(sub, st.sampled_from(_BIN), sub).map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
            st.tuples(st.sampled_from(["len", "min", "max", "abs", "int", "float", "range", "sqrt", "log2", "ceil"]),
                      sub).map(lambda t: f"{t[0]}({t[1]})"),
            st.tuples(sub, st.integers(0, 40)).map(lambda t: f"[{', '.join([t[0]] * t[1])}]"),
            st.tuples(sub, sub).map(lambda t: f"{t[0]}[{t[1]}]"),
            st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        ),
        max_leaves=12,
    )


@FUZZ
@given(_expr_strategy())
def test_expressions_value_or_expr_error(text: str) -> None:
    with hang_guard():
        try:
            evaluate(text, {"i": 3, "n": 4})
        except ExprError:
            pass


# -- YAML structure ------------------------------------------------------------------------------------------
_KEYS = ["schema_version", "name", "world_size", "ops", "params", "kind", "m", "n", "k", "ranks", "deps", "stream",
         "foreach", "when", "bytes", "shape", "dtype", "duration_us", "pipeline", "p", "v", "schedule", "tags",
         "launch", "peer", "group"]
_SCALARS = st.one_of(
    st.integers(-3, 5), st.sampled_from([0, 1, 2, 10**9, 2**70, 1.5, -0.5, float("nan"), float("inf"), True, None]),
    st.sampled_from(["a", "mm{i}", "{i}", "range(3)", "range(10000000)", "all", "matmul", "compute", "all_reduce",
                     "send", "recv", "fp16", "1f1b", "{x", "}", "{1/0}", "{len([range(9999999)]*30)}", "", "訓練"]),
)
_YAML_TREE = st.recursive(
    _SCALARS,
    lambda sub: st.one_of(st.lists(sub, max_size=4), st.dictionaries(st.sampled_from(_KEYS), sub, max_size=5)),
    max_leaves=25,
)
_OP = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b{i}", "c"]), "kind": st.sampled_from(["matmul", "compute", "all_reduce", "send",
                                                                         "recv", "memcpy", "nope"])},
    optional={k: _SCALARS for k in ("m", "n", "k", "ranks", "deps", "stream", "bytes", "duration_us", "peer", "when")},
)


def _schedule_strategy() -> st.SearchStrategy[dict]:
    loop = st.fixed_dictionaries({"foreach": st.dictionaries(st.sampled_from(["i", "j"]), _SCALARS, min_size=1,
                                                             max_size=2),
                                  "ops": st.lists(_OP, max_size=3)})
    ops = st.lists(st.one_of(_OP, loop, _YAML_TREE), max_size=4)
    return st.fixed_dictionaries({"schema_version": st.just(1), "name": st.sampled_from(["t", ".", "訓練"]),
                                  "world_size": st.one_of(st.integers(1, 4), _SCALARS), "ops": ops},
                                 optional={"params": st.dictionaries(st.sampled_from(["i", "n", "chunks"]), _SCALARS,
                                                                     max_size=2),
                                           "launch": _SCALARS, "pipeline": _YAML_TREE})


def _load_build_simulate(text: str) -> None:
    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    try:
        spec = load_text(text, "fuzz.yaml")
        simulate(lower(spec), load_profile("h200"))
    except SchedsimError:
        pass


@FUZZ
@given(_schedule_strategy())
def test_schedules_load_or_schedsim_error(doc: dict) -> None:
    with hang_guard():
        _load_build_simulate(yaml.safe_dump(doc, allow_unicode=True))


@FUZZ
@given(_YAML_TREE)
def test_any_yaml_tree_loads_or_schedsim_error(tree: object) -> None:
    with hang_guard():
        _load_build_simulate(yaml.safe_dump(tree, allow_unicode=True))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(alphabet="[]{}:-, \n'\"&*!|>ab1", max_size=200))
def test_raw_yaml_text_loads_or_schedsim_error(text: str) -> None:
    with hang_guard():
        _load_build_simulate("schema_version: 1\nname: t\nworld_size: 1\nops: " + text)


# -- trace events --------------------------------------------------------------------------------------------
_NUM = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**16),
                 st.sampled_from(["12", "x", None, [], {}]))
_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "M", "i"]), "cat": st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset",
                                                                    "gpu_user_annotation", "cpu_op",
                                                                    "user_annotation", "Kernel", None, 5])},
    optional={"name": st.sampled_from(["gemm", "ncclDevKernel_AllReduce_RING_LL", "mm0@r0", "nccl:all_reduce",
                                       "record_param_comms", "process_name", 3]),
              "ts": _NUM, "dur": _NUM, "pid": st.sampled_from([0, 1, 5000, "x"]), "tid": st.sampled_from([7, "s"]),
              "args": st.one_of(st.none(), st.sampled_from([5, "x", []]), st.fixed_dictionaries({}, optional={
                  "device": st.sampled_from([0, 1, "x", None]), "stream": st.sampled_from([7, 20, None]),
                  "bytes": _NUM, "Collective name": st.sampled_from(["allreduce", 5]), "In msg nelems": _NUM,
                  "dtype": st.sampled_from(["Float", "bf16", 3]), "Input Dims": st.sampled_from([[[3]], "x", 5])}))},
)
_DIST = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"rank": st.sampled_from([0, 1, -1, 7, "0", None]),
                                                                  "world_size": st.sampled_from([1, 2, 0, "2", None])}))


def _dump(obj: object) -> str:
    return json.dumps(obj, allow_nan=True)


@FUZZ
@given(st.lists(_EVENT, max_size=12), _DIST, st.sampled_from([None, 0, 1700000000000000000, "x", float("inf"), -5, 1e30]))
def test_kineto_events_import_or_trace_error(events: list, dist: object, base: object) -> None:
    import tempfile

    from schedsim.trace.kineto import import_kineto

    doc: dict = {"traceEvents": events}
    if dist is not None:
        doc["distributedInfo"] = dist
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    with tempfile.TemporaryDirectory() as d, hang_guard():
        p = Path(d) / "t.json"
        p.write_text(_dump(doc))
        try:
            res = import_kineto([p])
        except SchedsimError:
            return
        for s in res.timeline.spans:  # what is accepted is sane: no silently wrong times
            assert math.isfinite(s.start_s) and math.isfinite(s.end_s) and s.end_s >= s.start_s


@FUZZ
@given(st.lists(st.fixed_dictionaries({"id": st.sampled_from(["a@r0", "b@r0", 3]), "name": st.just("a"),
                                       "rank": st.sampled_from([0, 1, "x"]), "stream": st.just("s"),
                                       "kind": st.just("matmul"), "start_s": _NUM, "end_s": _NUM}),
                max_size=4), st.sampled_from([1, 2, "1", None]), st.sampled_from([1, 2, 0, "x", None, 2.5]))
def test_timelines_read_or_trace_error(ops: list, version: object, world_size: object) -> None:
    from schedsim.sim.timeline import Timeline

    with hang_guard():
        try:
            tl = Timeline.from_dict({"format": "schedsim.timeline", "version": version, "ops": ops,
                                     "world_size": world_size})
        except SchedsimError:
            return
        ids = [s.id for s in tl.spans]
        assert len(ids) == len(set(ids))
        for s in tl.spans:
            assert math.isfinite(s.start_s) and math.isfinite(s.end_s) and s.end_s >= s.start_s
