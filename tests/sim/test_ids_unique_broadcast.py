"""``coded._ids_unique`` of a column of one id held as a read-only broadcast (a Program's ``tags_id`` where no op has
tags): the values and inverse that the same column written out gives, the inverse made without a row array."""

from __future__ import annotations

import numpy as np

from schedsim.coded import _ids_unique


def test_a_broadcast_column_gives_what_the_written_column_gives():
    col = np.broadcast_to(np.array([7], np.int32), (1000,))
    u, inv = _ids_unique(col)
    u2, inv2 = _ids_unique(np.array(col))
    assert u.dtype == u2.dtype == inv.dtype == inv2.dtype == np.int64
    assert u.tolist() == u2.tolist() == [7]
    assert np.array_equal(inv, inv2) and not inv.any() and inv.strides == (0,)
