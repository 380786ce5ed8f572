"""The lowering gives the Programs it gave before its speed-ups (tests/data/lowering_golden.npz, written by
tests/data/make_lowering_golden.py with main at fb50fe6): every array (values and dtype), op name, tag set,
stream, string, collective key, warning and template, for small pipelines of every built-in schedule kind
(both p2p modes, data parallelism) and custom inline actions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
_spec = importlib.util.spec_from_file_location("make_lowering_golden", DATA / "make_lowering_golden.py")
assert _spec is not None and _spec.loader is not None
gold = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gold)
GOLDEN = np.load(DATA / "lowering_golden.npz")


@pytest.mark.parametrize("case", sorted(gold.cases()))
def test_lowering_matches_the_golden_program(case: str) -> None:
    from schedsim.lower.program import NARROW

    got = gold.program_state(gold.cases()[case])
    for k in gold.ARRAYS:
        want = GOLDEN[f"{case}/{k}"]
        # the dependency CSR and edges are int32 now where they fit (the golden's are int64): the same values
        assert got[k].dtype == (np.dtype(np.int32) if k in NARROW and want.dtype == np.int64 else want.dtype), k
        np.testing.assert_array_equal(got[k], want, err_msg=k)
    assert json.loads(str(got["text"])) == json.loads(str(GOLDEN[f"{case}/text"]))
