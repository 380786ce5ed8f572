"""A timeline file's ``meta`` entries that the readers use are checked on read (``_check_meta``): here
``graph_segments`` (``execute``'s CUDA graph segments, op ids that ``compare`` gives one span), which a
hand-edited file can break in ways that would otherwise silently drop segments or make the result depend on
their order."""

from __future__ import annotations

import pytest

from schedsim.errors import TraceError
from schedsim.sim.timeline import Span, Timeline


def _write(tmp_path, segments):  # type: ignore[no-untyped-def]
    spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.0),
             Span("b@r0", "b", 0, "s", "matmul", "compute", 1.0, 2.0)]
    p = tmp_path / "timeline.json"
    Timeline("x", "execute", 1, spans=spans, meta={"graph_segments": segments}).write_json(p)
    return p


def test_graph_segments_as_execute_writes_them_read_back(tmp_path):
    p = _write(tmp_path, [["a@r0", "b@r0"]])
    assert Timeline.read_json(p).meta["graph_segments"] == [["a@r0", "b@r0"]]


@pytest.mark.parametrize("segments", [
    "a@r0",  # not a list
    ["a@r0", "b@r0"],  # the ids of one segment, not a list of segments
    [["a@r0"], "b@r0"],  # one entry a string
    [[["a@r0"]]],  # nested one level too deep
    [["a@r0", None]],  # an id that is not a string
    [[]],  # an empty segment
    [["a@r0"], ["a@r0", "b@r0"]],  # one op in two segments: its span would depend on their order
    {"g": ["a@r0"]},  # an object
])
def test_malformed_graph_segments_are_refused_naming_the_file_and_entry(tmp_path, segments):
    p = _write(tmp_path, segments)
    with pytest.raises(TraceError, match=r"timeline\.json: meta\.graph_segments is .*not what schedsim writes") as e:
        Timeline.read_json(p)
    assert "fix: the file is corrupt or was edited" in str(e.value)


def _write_host(tmp_path, host):  # type: ignore[no-untyped-def]
    p = tmp_path / "timeline.json"
    Timeline("x", "execute", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.0)],
             meta={"makespan_uninstrumented_iters_s": [2e-3] * 4 + [1e-3] * 4,
                   "host_thread_uninstrumented": host}).write_json(p)
    return p


GOOD_HOST = {"wall_s": [2e-3] * 4 + [1e-3] * 4, "run_s": [1e-3] * 8, "runq_s": [1e-3] * 4 + [0.0] * 4,
             "vcsw": [0] * 8, "ivcsw": [2] * 4 + [0] * 8, "cpu_start": [1] * 8, "cpu_end": [1] * 4 + [None] * 4}


def test_host_thread_columns_as_execute_writes_them_read_back(tmp_path):
    p = _write_host(tmp_path, [GOOD_HOST, {}])
    assert Timeline.read_json(p).meta["host_thread_uninstrumented"] == [GOOD_HOST, {}]


@pytest.mark.parametrize("host", [
    {"wall_s": [1.0]},  # an object, not a list of them (one per rank)
    [{"wall_s": 5}],  # a column that is a number
    [{"run_s": "abcdefgh"}],  # a column that is a string
    [{**GOOD_HOST, "cpu_start": [0] * 4 + ["a"] * 4}],  # a value that is a string
    [{**GOOD_HOST, "cpu_start": [[0]] * 8}],  # a value that is a list
    [{**GOOD_HOST, "vcsw": {"a": 1}}],  # a column that is an object
    [[1.0, 2.0]],  # a rank's entry that is not an object
])
def test_malformed_host_thread_columns_are_refused_naming_the_file_and_entry(tmp_path, host):
    """``compare`` reads these columns for its drift warning: hand-edited, the file is refused (exit 2) before
    they are read, not an internal error in the middle of ``compare``."""
    p = _write_host(tmp_path, host)
    with pytest.raises(TraceError, match=r"meta\.host_thread_uninstrumented is .*not what schedsim writes"):
        Timeline.read_json(p)


def _memory(n: int) -> dict[str, object]:
    import numpy as np

    t = np.arange(n) * 1e-6 / 3  # floats whose text is long
    a = np.stack([t, np.where(np.arange(n) % 2, 1048576.0, 0.0)], axis=1)
    b = a.copy()
    b[5, 1] = -0.0  # equal to a as numbers, other bits (its text -0.0)
    c = a.copy()
    c[-1, 0] = np.nan  # written as null
    rank = {"static": {}, "peak_bytes": 1048576.0, "peak_s": 1e-6 / 3, "peak_op": "r0@r0"}
    steps = [a, a.copy(), b, c, a[:10], a[:10].copy(), [[0.0, 0.0], [1.0, 2.0]], c.copy()]
    return {"unit": "bytes", "ranks": {r: {**rank, "steps": s} for r, s in enumerate(steps)}}


@pytest.mark.parametrize("n", [1024, 3000])
def test_memory_steps_alike_are_written_once_as_the_dict_writes_them(tmp_path, monkeypatch, n):
    # each distinct long steps array's text made once, put where every rank with the same bits has it: the
    # bytes of the plain dict's text (ranks 0 and 1 alike; 2 equal but for a -0.0; 3 and 7 with a NaN; short ones
    # and a list as they are), in timeline.json too, and read back as written
    import json

    from schedsim.io import _json_default, dumps_json
    from schedsim.sim import timeline_json
    from schedsim.sim.timeline_json import _MemoryJson

    mem = _memory(n)
    assert _MemoryJson(mem).json_bytes() == dumps_json(mem)
    assert _json_default(_MemoryJson(mem)) == json.loads(dumps_json(mem))  # the stdlib path's reading of it
    spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.0)]
    p, q = tmp_path / "a.json", tmp_path / "b.json"
    Timeline("x", "predict", 8, spans=spans, meta={"memory": mem, "z": 1}).write_json(p)
    monkeypatch.setattr(timeline_json, "_STEPS_SHARED", 10**9)  # every steps array where it stands
    Timeline("x", "predict", 8, spans=spans, meta={"memory": mem, "z": 1}).write_json(q)
    assert p.read_bytes() == q.read_bytes()
    got = Timeline.read_json(p).meta
    assert list(got) == ["memory", "z"]
    assert got["memory"]["ranks"]["1"]["steps"][-1] == mem["ranks"][1]["steps"][-1].tolist()


def test_memory_steps_alike_are_formatted_once(monkeypatch):
    import numpy as np

    from schedsim.sim import timeline_json

    made: list[int] = []

    def spy(obj, indent=False):  # type: ignore[no-untyped-def]
        if isinstance(obj, np.ndarray):
            made.append(len(obj))
        return dumps(obj, indent)

    dumps = timeline_json.dumps_json
    monkeypatch.setattr(timeline_json, "dumps_json", spy)
    timeline_json._MemoryJson(_memory(2000)).json_bytes()
    assert made == [2000, 2000, 2000]  # a (ranks 0, 1), b (2), c (3, 7): the short ones and the list in the dict
