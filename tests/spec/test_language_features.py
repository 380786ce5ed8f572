"""Schedule language: conditional groups, the `rank` variable, CSV error fixes."""

from __future__ import annotations

import re

import pytest

from schedsim.errors import SchedsimError, SpecError
from schedsim.graph.build import build_graph
from schedsim.pipeline import get_schedule, write_csv
from schedsim.spec.loader import load_schedule, load_text

HEAD = "schema_version: 1\nname: t\nworld_size: 4\nparams: {tp: 2}\nops:\n"


def names(text: str) -> list[str]:
    return list(build_graph(load_text(HEAD + text)))


@pytest.mark.parametrize("cond,kept", [("tp > 1", True), ("tp > 4", False), ("tp == 2 and world_size == 4", True)])
def test_when_with_ops_is_a_conditional_group(cond, kept):
    got = names(f"  - when: {cond}\n    ops:\n      - {{name: a, kind: compute, duration_us: 1}}\n"
                "      - {name: b, kind: compute, duration_us: 1, deps: [a]}\n"
                "  - {name: c, kind: compute, duration_us: 1}\n")
    assert got == ([f"{n}@r{r}" for r in range(4) for n in ("a", "b", "c")] if kept else [f"c@r{r}" for r in range(4)])


def test_group_rejects_op_fields_with_a_fix():
    with pytest.raises(SpecError, match="unknown key 'kind' in a group of ops") as e:
        names("  - when: tp > 1\n    kind: compute\n    ops: [{name: a, kind: compute, duration_us: 1}]\n")
    assert "fix:" in str(e.value)


def test_rank_variable_in_op_fields_and_when():
    G = build_graph(load_text(HEAD + (
        "  - {name: mm, kind: compute, duration_us: '{10 * (rank + 1)}'}\n"
        "  - {name: s, kind: send, peer: '{rank + 1}', bytes: 64, ranks: [0, 2]}\n"
        "  - {name: r, kind: recv, peer: '{rank - 1}', bytes: 64, ranks: [1, 3]}\n"
        "  - {name: first, kind: compute, duration_us: 1, when: rank == 0}\n")))
    assert [round(G.nodes[f"mm@r{r}"]["op"].duration_s * 1e6) for r in range(4)] == [10, 20, 30, 40]
    assert sorted(G.graph["p2p"]) == [("s@r0", "r@r1"), ("s@r2", "r@r3")]
    assert [n for n in G if n.startswith("first")] == ["first@r0"]


def test_rank_variable_collective_entries_form_one_collective():
    G = build_graph(load_text(HEAD + "  - {name: ar, kind: all_reduce, bytes: '{1024 + 0 * rank}'}\n"))
    assert list(G.graph["collectives"]) == ["ar#0,1,2,3"]


STAGE = """  stage:
    forward: [{name: f, kind: compute, duration_us: 1}]
    backward_input: [{name: i, kind: compute, duration_us: 1}]
    backward_weight: [{name: w, kind: compute, duration_us: 1}]
"""


@pytest.mark.parametrize("sch,p,m", [("zbv", 2, 4), ("zbv", 3, 6), ("dualpipev", 2, 4)])
def test_v_shaped_csv_without_placement_gets_the_hint(tmp_path, sch, p, m):
    write_csv(get_schedule(sch).generate(p, m, None), tmp_path / "o.csv")
    y = tmp_path / "s.yaml"
    y.write_text(f"schema_version: 1\nname: c\nworld_size: {p}\npipeline:\n  schedule: custom\n  p: {p}\n  m: {m}\n"
                 f"  csv: o.csv\n  activation_bytes: 64\n{STAGE}")
    with pytest.raises(SpecError) as e:
        build_graph(load_schedule(y))
    assert str(e.value).count("fix:") == 1 and "set placement: v" in str(e.value)
    y.write_text(y.read_text().replace("  csv: o.csv\n", "  csv: o.csv\n  placement: v\n"))
    assert len(build_graph(load_schedule(y)).graph["p2p"]) > 0


@pytest.mark.parametrize("cells,needle", [("0F0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0\n", "which is never issued"),
                                          ("0F0,0Q0\n1F0,1B0\n", "torch notation"),
                                          ("0F0,0B0\n1F0\n", "never runs a backward")])
def test_csv_errors_have_one_fix_in_yaml_terms(tmp_path, cells, needle):
    (tmp_path / "o.csv").write_text(cells)
    y = tmp_path / "s.yaml"
    y.write_text(f"schema_version: 1\nname: c\nworld_size: 2\npipeline:\n  schedule: custom\n  p: 2\n  m: 1\n"
                 f"  csv: o.csv\n  activation_bytes: 64\n{STAGE}")
    with pytest.raises(SchedsimError) as e:
        build_graph(load_schedule(y))
    text = str(e.value)
    assert text.count("fix:") == 1 and needle in text
    assert not re.search(r"format=|add_p2p|compute_only\(", text.split("fix:")[1])


def test_csv_with_sends_and_recvs_is_issued_as_written(tmp_path):
    (tmp_path / "o.csv").write_text("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
    y = tmp_path / "s.yaml"
    y.write_text(f"schema_version: 1\nname: c\nworld_size: 2\npipeline:\n  schedule: custom\n  p: 2\n  m: 1\n"
                 f"  csv: o.csv\n  activation_bytes: 64\n{STAGE}")
    G = build_graph(load_schedule(y))
    assert [x[0].split("@")[0] for x in G.graph["issue_order"][1]] == ["recvF1.0", "sendB1.0"]
