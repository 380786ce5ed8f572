"""Property: a timeline written as version 3 (names as coded parts, tags as per-key columns, ids from the
``{name}@r{rank}`` format) reads back to the same spans as the version-2 file of the same spans (names with
quotes, backslashes, braces, ``@r`` and non-ASCII; tags of every JSON scalar type, ``1`` / ``1.0`` / ``true``
kept apart, integers past 64 bits; rows without tags; no rows), and a version-3 file read and written again is
the same document."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.coded import Parts, TagColumns
from schedsim.graph.ops import tag_set
from schedsim.sim.timeline import Span, SpanColumns, Timeline

SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4))
NAME = st.text(alphabet=st.sampled_from(list('a"\\{}@r0é✓ ')), min_size=1, max_size=6)
ROWS = st.lists(st.tuples(NAME, st.integers(0, 2), st.dictionaries(st.sampled_from(["a", "b", 'q"', "é"]), SCALAR,
                                                                   max_size=3)),
                max_size=8, unique_by=lambda t: (t[0], t[1]))


def typed(tl: Timeline) -> list:  # type: ignore[type-arg]
    return [(s.id, s.name, s.rank, [(k, type(v).__name__, repr(v)) for k, v in sorted(s.tags.items())])
            for s in tl.spans]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(ROWS, st.integers(0, 3))
def test_version_3_reads_as_version_2_does(rows, cut):  # type: ignore[no-untyped-def]
    spans = [Span(f"{n}@r{r}", n, r, "s", "compute", "compute", 0.0, 1.0, tags=t) for n, r, t in rows]
    plain = Timeline("t", "predict", 3, spans=spans)
    c = plain.columns
    names = list(dict.fromkeys(n for n, _r, _t in rows))
    nid = np.array([names.index(n) for n, _r, _t in rows], np.int32)
    sets = list(dict.fromkeys(tag_set(t) for _n, _r, t in rows))
    tid = np.array([sets.index(tag_set(t)) for _n, _r, t in rows], np.int32)
    heads = list(dict.fromkeys(n[:cut] for n in names))  # each name in two parts, cut at a drawn place
    tails = list(dict.fromkeys(n[cut:] for n in names))
    parts = Parts([(heads, np.array([heads.index(names[k][:cut]) for k in nid], np.int32)),
                   (tails, np.array([tails.index(names[k][cut:]) for k in nid], np.int32))])
    coded = SpanColumns(lambda: c.id, lambda: c.name, c.rank, c.stream, c.kind, c.resource, c.start_s, c.end_s,
                        c.solo_s, c.ready_s, c.bytes, c.flops, None, coded_ids=(tuple(names), nid),
                        coded_tags=TagColumns.of_items(sets, tid), name_parts=parts)
    with tempfile.TemporaryDirectory() as d:
        p3, p2, again = Path(d) / "v3.json", Path(d) / "v2.json", Path(d) / "again.json"
        Timeline("t", "predict", 3, columns=coded).write_json(p3)
        plain.write_json(p2)
        assert json.loads(p3.read_text())["version"] == 3
        r3, r2 = Timeline.read_json(p3), Timeline.read_json(p2)
        assert r3 == r2 and typed(r3) == typed(r2) == typed(plain)
        r3.write_json(again)
        assert json.loads(again.read_text()) == json.loads(p3.read_text())
