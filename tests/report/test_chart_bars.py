"""The charts' box collections (``chart_base._bars``) leave the axes' data limits alone: every chart sets both
axes' limits itself, and measuring each collection's paths for autoscaling cost ~0.4 CPU s of pp=32's charts."""

from __future__ import annotations

import numpy as np


def test_bars_draw_the_boxes_without_measuring_them():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from schedsim.report.chart_base import _bars

    fig, ax = plt.subplots()
    before = ax.dataLim.frozen()
    col = _bars(ax, np.array([1.0, 5.0]), np.array([2.0, 1.0]), 3.0, 0.5, facecolors="red")
    assert col in ax.collections
    assert np.array_equal(ax.dataLim.get_points(), before.get_points())  # not grown to [1, 6] x [3, 3.5]
    # the boxes themselves: [x0, x0 + w] x [y0, y0 + h]
    assert [p.vertices[:4].tolist() for p in col.get_paths()] == [
        [[1.0, 3.0], [1.0, 3.5], [3.0, 3.5], [3.0, 3.0]], [[5.0, 3.0], [5.0, 3.5], [6.0, 3.5], [6.0, 3.0]]]
    plt.close(fig)
