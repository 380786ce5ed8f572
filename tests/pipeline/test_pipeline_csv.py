"""PyTorch pipeline CSV and inline action lists (schedsim.pipeline.csv_io)."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedsim.pipeline import (
    Action,
    ComputationType,
    OverlapAction,
    dumps_csv,
    format_order,
    generate,
    loads_csv,
    parse_order,
    read_csv,
    write_csv,
)

CT = ComputationType

_plain = st.builds(
    Action,
    st.integers(0, 64),
    st.sampled_from([CT.F, CT.I, CT.B, CT.W]),
    st.integers(0, 512),
)
_overlap = st.builds(
    OverlapAction,
    st.builds(Action, st.integers(0, 64), st.just(CT.F), st.integers(0, 512)),
    st.builds(Action, st.integers(0, 64), st.just(CT.B), st.integers(0, 512)),
)
_cell = st.one_of(st.none(), _plain, _overlap)
orders = st.integers(1, 5).flatmap(lambda n: st.fixed_dictionaries({r: st.lists(_cell, max_size=12) for r in range(n)}))


class TestCsv:
    def test_exact_text(self):
        order = parse_order({0: "0F0 _ 0B0", 1: "_ 1F0 1B0 (1F1;2B0)OVERLAP_F_B"})
        assert dumps_csv(order) == "0F0,,0B0\r\n,1F0,1B0,(1F1;2B0)OVERLAP_F_B\r\n"

    @settings(max_examples=80, deadline=None)
    @given(orders)
    def test_round_trip(self, order):
        assert loads_csv(dumps_csv(order)) == order

    def test_file_round_trip(self, tmp_path):
        order = generate("dualpipev", 4, 10)
        path = tmp_path / "dualpipev_4rank_10mb.csv"
        write_csv(order, path)
        assert read_csv(path) == order
        assert path.read_text().splitlines()[0].startswith("0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,7I0,7W0,")
        assert ",(0F7;7B3)OVERLAP_F_B," in path.read_text().splitlines()[0]

    def test_file_objects(self):
        buf = io.StringIO()
        write_csv({0: [Action(0, CT.F, 0)]}, buf)
        buf.seek(0)
        assert read_csv(buf) == {0: [Action(0, CT.F, 0)]}

    def test_compute_only_rejects_p2p(self):
        text = "0F0,0SEND_F0\r\n1RECV_F0,1F0\r\n"
        with pytest.raises(ValueError, match=r"rank 0, step 1: 0SEND_F0 is a p2p action but format='compute_only'"):
            loads_csv(text)
        assert loads_csv(text, format="compute_comms")[1] == [Action(1, CT.RECV_F, 0), Action(1, CT.F, 0)]

    def test_bad_cell_names_row_and_column(self, tmp_path):
        path = tmp_path / "bad.csv"
        path.write_text("0F0,0B0\n1F0,1Q0\n")
        with pytest.raises(ValueError, match=r"bad.csv: row 1 \(rank 1\), column 1: invalid action '1Q0'"):
            read_csv(path)

    def test_bad_format_name(self):
        with pytest.raises(ValueError, match=r"format must be 'compute_only' or 'compute_comms'"):
            loads_csv("0F0\n", format="simple")  # type: ignore[arg-type]

    def test_rows_must_be_ranks_0_to_n(self):
        with pytest.raises(ValueError, match=r"CSV rows are ranks 0..n-1, got ranks \[0, 2\]"):
            dumps_csv({0: [], 2: []})


class TestInline:
    def test_forms_agree(self):
        expected = {0: [Action(0, CT.F, 0), None, Action(0, CT.B, 0)], 1: [Action(1, CT.F, 0)]}
        assert parse_order({0: "0F0 _ 0B0", 1: "1F0"}) == expected
        assert parse_order({0: "0F0, ., 0B0", "1": "1F0"}) == expected
        assert parse_order({0: ["0F0", "", "0B0"], 1: ["1F0"]}) == expected
        assert parse_order(["0F0 _ 0B0", "1F0"]) == expected
        assert parse_order([["0F0", "_", "0B0"], ["1F0"]]) == expected

    def test_overlap_token(self):
        assert parse_order({0: "(0F7;7B3)OVERLAP_F_B 0W0"})[0][0] == OverlapAction(
            Action(0, CT.F, 7), Action(7, CT.B, 3)
        )

    @settings(deadline=None)
    @given(orders)
    def test_round_trip(self, order):
        assert parse_order(format_order(order)) == order

    def test_bad_token(self):
        with pytest.raises(ValueError, match=r"rank 1, position 2: invalid action '1G1'"):
            parse_order({0: "0F0", 1: "1F0 1B0 1G1"})

    def test_bad_rank_key(self):
        with pytest.raises(ValueError, match=r"rank key 'r0' is not an integer"):
            parse_order({"r0": "0F0"})
