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
