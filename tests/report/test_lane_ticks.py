"""The lane labels of the Gantt and pipeline charts (``chart_base._lane_ticks``): one artist draws every lane's tick
mark and label, as the y axis' own ticks drew them (``tests/oracle/lane_ticks.py``): the same Agg pixels, the same
tick labels read back, the same tight bounding box, and no ``Tick`` object per lane."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from schedsim.report.chart_base import _agg_canvas, _fig, _lane_ticks
from tests.oracle.lane_ticks import lane_ticks

LABELS = ["r0 compute", "r0 pp_recvB_r1 (p)", "r1 comm", "r12 pp_sendF_r13", "rank 3 (stage 3,35,67,99)",
          "others: busy share", "ÅÇ [predicted]", r"lane $\alpha_2$"]


def _chart(label: Any, ylim: tuple[float, float], fontsize: float = 7) -> Any:
    fig = _fig(6, 3)
    ax = fig.add_subplot(111)
    ax.broken_barh([(0.1, 0.5), (0.7, 0.2)], (1.6, 0.8), facecolors="#1F77B4")
    label(ax, LABELS, fontsize)
    ax.set_xlim(0, 1)
    ax.set_ylim(*ylim)
    ax.set_xlabel("time (ms)")
    fig.subplots_adjust(left=0.3)
    return fig


def _pixels(fig: Any) -> np.ndarray:
    canvas = _agg_canvas()(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


@pytest.mark.parametrize("ylim", [(len(LABELS) - 0.5, -0.6), (-0.5, len(LABELS) - 0.5), (4.2, 1.5)])
@pytest.mark.parametrize("fontsize", [6, 7])
def test_lane_labels_draw_the_pixels_of_the_axis_ticks(ylim: tuple[float, float], fontsize: float) -> None:
    # lanes upside down (the charts'), upright, and a view of lanes 2..4 only (the others are not drawn)
    ours, theirs = _chart(_lane_ticks, ylim, fontsize), _chart(lane_ticks, ylim, fontsize)
    a, b = _pixels(ours), _pixels(theirs)
    assert a.shape == b.shape
    assert (a == b).all()
    left = int(ours.axes[0].get_position().x0 * a.shape[1])
    assert (a[:, :left - 2, :3] < 128).any(axis=-1).sum() > 300  # dark label pixels left of the axes


def test_lane_ticks_read_back_and_make_no_tick_per_lane() -> None:
    fig = _chart(_lane_ticks, (len(LABELS) - 0.5, -0.6))
    ax = fig.axes[0]
    _pixels(fig)
    assert len(ax.yaxis.majorTicks) == 1  # the template only: nothing made a Tick per lane
    assert [t.get_text() for t in ax.get_yticklabels()] == LABELS
    assert list(ax.get_yticks()) == list(range(len(LABELS)))
    assert [t.get_fontsize() for t in ax.get_yticklabels()] == [7] * len(LABELS)


def test_lane_labels_count_in_the_tight_bounding_box() -> None:
    # savefig(bbox_inches="tight") and tight_layout measure the labels as they measured the axis' ticks
    ours, theirs = _chart(_lane_ticks, (len(LABELS) - 0.5, -0.6)), _chart(lane_ticks, (len(LABELS) - 0.5, -0.6))
    boxes = []
    for fig in (ours, theirs):
        canvas = _agg_canvas()(fig)
        boxes.append(fig.get_tightbbox(canvas.get_renderer()).bounds)
    assert boxes[0] == pytest.approx(boxes[1], abs=1e-9)
    left = ours.axes[0].get_position().x0 * ours.get_figwidth()
    assert boxes[0][0] < left - 0.5  # the labels reach well left of the axes


def test_lane_labels_in_svg_as_in_the_png() -> None:
    # the SVG backend draws the same marks and glyph paths: one <use> of the tick marker per lane
    buf = io.BytesIO()
    _chart(_lane_ticks, (len(LABELS) - 0.5, -0.6)).savefig(buf, format="svg")
    svg = buf.getvalue().decode()
    assert svg.count("<!-- r0 compute -->") == 1 and svg.count("<!-- rank 3 (stage 3,35,67,99) -->") == 1
    group = svg[svg.index('<g id="lane ticks'):]
    mark = group[group.index('<path id="') + 10:]
    assert svg.count(f'xlink:href="#{mark[:mark.index(chr(34))]}"') == len(LABELS)


ODD = ["a\nb", "", "東京 Ωμέγα", "a\tb", "$a$\nb", "L" * 120, "e\u0301 שלום", " lead"]


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")  # CJK labels on purpose: both sides draw tofu
@pytest.mark.parametrize("fontsize", [7, 0.5])
def test_lane_labels_of_a_chart_without_y_limits_as_the_axis_ticks(fontsize: float) -> None:
    # no set_ylim after the labels: set_yticks widened the view to lanes 0 .. 7, the artist's locator must as well;
    # a tiny font leaves the tick marks outside the labels' boxes, which the axis' tight box never counted
    figs = []
    for label in (_lane_ticks, lane_ticks):
        fig = _fig(6, 3)
        ax = fig.add_subplot(111)
        label(ax, ODD, fontsize)
        ax.set_xlim(0, 1)
        figs.append(fig)
    assert figs[0].axes[0].get_ylim() == figs[1].axes[0].get_ylim() == (0.0, 7.0)
    a, b = _pixels(figs[0]), _pixels(figs[1])
    assert (a == b).all()
    boxes = [fig.get_tightbbox(_agg_canvas()(fig).get_renderer()).bounds for fig in figs]
    assert boxes[0] == pytest.approx(boxes[1], abs=1e-9)


def test_odd_lane_labels_draw_the_pixels_of_the_axis_ticks() -> None:
    # several lines, an empty label, glyphs from fallback fonts, a tab, math then a newline, a long label
    global LABELS
    saved, LABELS = LABELS, ODD
    try:
        ours, theirs = _chart(_lane_ticks, (len(ODD) - 0.5, -0.6)), _chart(lane_ticks, (len(ODD) - 0.5, -0.6))
    finally:
        LABELS = saved
    assert (_pixels(ours) == _pixels(theirs)).all()


@pytest.mark.parametrize("rc", [{"axes.grid": True}, {"axes.grid": True, "axes.grid.axis": "x"},
                                {"ytick.right": True, "ytick.labelright": True}, {"ytick.left": False},
                                {"ytick.direction": "in", "ytick.major.size": 10}])
def test_lane_labels_under_a_matplotlibrc_draw_the_pixels_of_the_axis_ticks(rc: dict[str, Any]) -> None:
    # a matplotlibrc's y grid lines and right-hand ticks, which the artist does not draw, leave the lanes to the axis
    import matplotlib

    with matplotlib.rc_context(rc):
        ours, theirs = _chart(_lane_ticks, (len(LABELS) - 0.5, -0.6)), _chart(lane_ticks, (len(LABELS) - 0.5, -0.6))
        a, b = _pixels(ours), _pixels(theirs)
    assert (a == b).all()
    drawn_by_axis = rc.get("axes.grid.axis", "both") != "x" and rc.get("axes.grid", False) or "ytick.right" in rc
    assert len(ours.axes[0].yaxis.majorTicks) == (len(LABELS) if drawn_by_axis else 1)
