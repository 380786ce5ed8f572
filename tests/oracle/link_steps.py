"""Oracle: :func:`schedsim.network.share._link_steps` as it was before each shown link's steps were gathered from
every flow's share history at once: a Python loop over the link's entries, each flow's share integral and rate
changes made per (link, flow) (16 links × 7,813 collectives on 64 ranks took 2.8 CPU s). The tests put it in place
of the package's and hold :func:`schedsim.network.share.link_utilisation`'s result equal, float for float."""

from __future__ import annotations

import numpy as np

from schedsim.network.share import _steps_of

__all__ = ["link_steps"]


def link_steps(link: np.ndarray, g_of: np.ndarray, moved: np.ndarray, hist: dict[int, tuple[np.ndarray, np.ndarray]],
               links: list[int], G: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per link of ``links``, its steps ``(times, bytes/s)`` (the package's ``_link_steps``' arguments)."""
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for k in links:
        ts: list[float] = []
        ds: list[float] = []
        for e in np.flatnonzero(link == k).tolist():
            segs = hist.get(int(g_of[e]))
            if not segs:
                continue
            times, shares = segs
            area = float(np.dot(np.diff(times), shares[:-1]))  # the share's integral over the transfer
            v = moved[e] * shares / area  # B/s: the flow's bytes on this link, in proportion to its share
            dv = np.diff(np.r_[0.0, v[:-1], 0.0])
            ts.extend(times.tolist())
            ds.extend(dv.tolist())
        out[k] = _steps_of(np.array(ts), np.array(ds))
    return out
