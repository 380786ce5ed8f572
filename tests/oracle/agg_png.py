"""Oracle: a chart's PNG as ``chart_base.write_figure`` wrote it before it drew with ``chart_base._agg_canvas``:
matplotlib's own Agg canvas (``FigureCanvasAgg``: every text through ``RendererAgg.draw_text``, glyph by glyph) and
its PNG writer (``print_png``: PIL, RGBA). ``tests/report/test_chart_png.py`` holds the
decoded pixels of the two equal."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

__all__ = ["matplotlib_png", "pixels"]


def matplotlib_png(fig: Any) -> bytes:
    """``fig`` saved as PNG by matplotlib's Agg canvas (set as the figure's canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def pixels(png: bytes) -> np.ndarray:
    """The decoded RGBA pixels of a PNG file (rows × columns × 4, uint8), by PIL."""
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))
