"""Action text round trips and parse errors (schedsim.pipeline.actions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedsim.pipeline.actions import (
    Action,
    ComputationType,
    OverlapAction,
    parse_action,
)

CT = ComputationType
MB_TYPES = [CT.F, CT.I, CT.B, CT.W, CT.SEND_F, CT.RECV_F, CT.SEND_B, CT.RECV_B]

actions = st.builds(
    Action,
    st.integers(0, 10_000),
    st.sampled_from(MB_TYPES),
    st.integers(0, 10_000),
)
overlaps = st.builds(
    OverlapAction,
    st.builds(Action, st.integers(0, 999), st.just(CT.F), st.integers(0, 999)),
    st.builds(Action, st.integers(0, 999), st.sampled_from([CT.B, CT.I]), st.integers(0, 999)),
)


class TestStr:
    @pytest.mark.parametrize(
        ("action", "text"),
        [
            (Action(2, CT.F, 0), "2F0"),
            (Action(1, CT.B, 3), "1B3"),
            (Action(3, CT.SEND_F, 1), "3SEND_F1"),
            (Action(0, CT.RECV_B, 12), "0RECV_B12"),
            (Action(4, CT.I, 7), "4I7"),
            (Action(4, CT.W, 7), "4W7"),
            (Action(0, CT.UNSHARD, None), "0UNSHARD"),
            (OverlapAction(Action(0, CT.F, 7), Action(7, CT.B, 3)), "(0F7;7B3)OVERLAP_F_B"),
        ],
    )
    def test_torch_notation(self, action, text):
        assert str(action) == text
        assert repr(action) == text
        assert parse_action(text) == action
        assert Action.parse(text) == action

    def test_overlap_parts(self):
        ov = Action.parse("(0F7;7B3)OVERLAP_F_B")
        assert isinstance(ov, OverlapAction)
        assert ov.type is CT.OVERLAP_F_B
        assert ov.sub_actions == (Action(0, CT.F, 7), Action(7, CT.B, 3))

    def test_whitespace_is_ignored(self):
        assert parse_action("  2F0\n") == Action(2, CT.F, 0)
        assert parse_action("( 0F7 ; 7B3 )OVERLAP_F_B").backward == Action(7, CT.B, 3)


class TestRoundTrip:
    @settings(deadline=None)
    @given(actions)
    def test_action(self, a):
        assert Action.parse(str(a)) == a

    @settings(deadline=None)
    @given(overlaps)
    def test_overlap(self, a):
        assert Action.parse(str(a)) == a
        assert OverlapAction.parse(str(a)) == a

    @settings(deadline=None)
    @given(st.sampled_from([CT.UNSHARD, CT.RESHARD, CT.REDUCE_GRAD]), st.integers(0, 99))
    def test_bookkeeping(self, t, s):
        a = Action(s, t, None)
        assert parse_action(str(a)) == a
        assert not a.is_compute and not a.is_comm


class TestParseErrors:
    @pytest.mark.parametrize(
        ("token", "fragment"),
        [
            ("", "empty token"),
            ("F0", "invalid action 'F0'"),
            ("2X0", "invalid action '2X0'"),
            ("2F0x", "invalid action '2F0x'"),
            ("2F", "needs a microbatch index"),
            ("2SEND_F", "needs a microbatch index"),
            ("0UNSHARD3", "takes no microbatch"),
            ("(0F7;7B3)OVERLAP", "must end in 'OVERLAP_F_B'"),
            ("(0F7)OVERLAP_F_B", "exactly two"),
            ("(7B3;0F7)OVERLAP_F_B", "pairs a forward with a backward"),
            ("(0F7;7B3", "invalid action '(0F7;7B3'"),
        ],
    )
    def test_bad_token_is_named_with_valid_form(self, token, fragment):
        with pytest.raises(ValueError, match=r"invalid action") as info:
            parse_action(token)
        msg = str(info.value)
        assert fragment in msg
        assert repr(token) in msg
        assert "2F0" in msg or "OVERLAP_F_B" in msg  # shows the valid form

    def test_flags(self):
        assert Action(0, CT.F, 0).is_compute
        assert Action(0, CT.SEND_F, 0).is_comm
        ov = OverlapAction(Action(0, CT.F, 0), Action(1, CT.B, 0))
        assert ov.is_compute and not ov.is_comm


def test_package_does_not_import_torch():
    code = (
        "import sys, schedsim.pipeline as p; "
        "p.generate('dualpipev', 4, 8); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    "module",
    ["actions", "schedules", "comms", "validate", "csv_io", "analytic"],
)
def test_docstring_examples(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"schedsim.pipeline.{module}")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
