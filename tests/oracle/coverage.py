"""The busy time of intervals in each bin, one group at a time (``chart_base._coverage`` before the groups were
summed together as rows of one padded array, ``chart_base._coverages``): the floats the rasters' colours are chosen
by."""

from __future__ import annotations

from typing import Any


def coverage(starts: Any, ends: Any, edges: Any) -> Any:
    """Σ over the intervals [starts, ends) of their overlap with each bin [edges[j], edges[j + 1]): len(edges) − 1
    values (``edges`` ascending): Σ_{s < e} (e − s) − Σ_{t < e} (e − t) over the sorted starts s and ends t, by
    ``np.searchsorted`` and ``np.cumsum`` of the group alone."""
    import numpy as np

    st, en = np.sort(starts), np.sort(ends)
    cs, ce = np.concatenate([[0.0], np.cumsum(st)]), np.concatenate([[0.0], np.cumsum(en)])
    ks = np.searchsorted(st, edges, side="right")
    ke = np.searchsorted(en, edges, side="right")
    return np.diff((edges * ks - cs[ks]) - (edges * ke - ce[ke]))
