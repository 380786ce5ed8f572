"""The PNG writer of the charts (``chart_png.png_bytes``, through ``chart_base._agg_canvas``): the pixels, size,
resolution and text chunks read back by PIL, and every chart the same pixels as matplotlib's own Agg canvas and PNG
writer drew (``tests/oracle/agg_png.py``), its text included."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import numpy as np
import pytest

from schedsim.report import chart_base as B
from schedsim.report import chart_png as PNG
from schedsim.report import gantt as G
from schedsim.report import pipeline_chart as P
from schedsim.sim.timeline import Span, Timeline
from tests.oracle.agg_png import matplotlib_png, pixels


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """(type, data) of each chunk of a PNG file, its CRC checked."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    out, i = [], 8
    while i < len(png):
        n = int.from_bytes(png[i:i + 4], "big")
        kind, data = png[i + 4:i + 8], png[i + 8:i + 8 + n]
        assert int.from_bytes(png[i + 8 + n:i + 12 + n], "big") == zlib.crc32(kind + data)
        out.append((kind, data))
        i += 12 + n
    return out


def test_png_bytes_round_trip_opaque_as_rgb_and_translucent_as_rgba():
    from PIL import Image

    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, (5, 7, 4), dtype=np.uint8)
    img[..., 3] = 255
    png = PNG.png_bytes(img, 110, {"Title": "gantt", "Author": "Zoë Ω", "Skip": None})
    got = Image.open(io.BytesIO(png))
    assert got.mode == "RGB" and got.size == (7, 5)
    assert (pixels(png) == img).all()
    # pHYs: 110 dpi as 4,331 pixels per metre (int(110 / 0.0254 + 0.5)), as PIL writes it
    kinds = dict(_chunks(png))
    assert kinds[b"pHYs"] == (4331).to_bytes(4, "big") * 2 + b"\x01"
    assert got.info["Software"].startswith("Matplotlib version") and got.info["Title"] == "gantt"
    assert got.info["Author"] == "Zoë Ω" and "Skip" not in got.info  # not Latin-1: an iTXt chunk, UTF-8
    assert [k for k, _ in _chunks(png)] == [b"IHDR", b"tEXt", b"tEXt", b"iTXt", b"pHYs", b"IDAT", b"IEND"]
    # every row filtered "Up" (type 2): the first row as it is, each later one minus the row above, byte by byte
    raw = np.frombuffer(zlib.decompress(kinds[b"IDAT"]), np.uint8).reshape(5, 7 * 3 + 1)
    assert (raw[:, 0] == 2).all() and (raw[0, 1:] == img[0, :, :3].reshape(-1)).all()
    assert (raw[1:, 1:] == (img[1:, :, :3].astype(int) - img[:-1, :, :3]).reshape(4, -1) % 256).all()
    img[2, 3, 3] = 17  # one translucent pixel: RGBA kept
    png = PNG.png_bytes(img, 72)
    assert Image.open(io.BytesIO(png)).mode == "RGBA" and (pixels(png) == img).all()


def test_png_bytes_of_several_row_blocks_and_a_strided_image():
    # 3,000 px wide: 87 rows a block (~1 MB), so 200 rows are three blocks, each filtered from the last row of the
    # block before; an opaque image and one with translucent pixels in the last block, both as a strided view
    from PIL import Image

    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (200, 3000, 4), dtype=np.uint8)
    img[..., 3] = 255
    assert (pixels(PNG.png_bytes(img, 110)) == img).all()
    img[190:, 5, 3] = 9
    wide = np.zeros((200, 6000, 4), np.uint8)
    wide[:, ::2] = img
    got = PNG.png_bytes(wide[:, ::2], 110)
    assert Image.open(io.BytesIO(got)).mode == "RGBA" and (pixels(got) == img).all()


def _idat_rows(png: bytes, h: int, n: int) -> np.ndarray:
    """The decompressed IDAT of ``png`` (its Adler-32 checked by zlib) as ``h`` rows of ``n`` bytes."""
    idat = b"".join(d for k, d in _chunks(png) if k == b"IDAT")
    return np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, n)


@pytest.mark.parametrize("rgba", [False, True])
def test_png_bytes_runs_of_repeated_rows(rgba):
    """Rows equal to the row above, in runs of 0 to 40 (3 below BLANK_RUN_MIN, 4 at it, 16 and 17 about the copied
    segment's 16 rows), one running across a row block's end (87 rows of 3,000 px), and the image's last rows: the
    same filtered bytes as every row filtered, the same pixels read back by PIL, the stream's Adler-32 what zlib
    computes (``zlib.decompress`` checks it)."""
    rng = np.random.default_rng(11)
    runs = [1, 4, 5, 2, 17, 18, 6, 41, 1, 21, 34, 5, 10, 4]  # each a new row then k - 1 rows like it
    h, w = sum(runs), 3000
    img = np.empty((h, w, 4), np.uint8)
    blank, r = [], 0
    for k in runs:
        img[r:r + k] = rng.integers(0, 256, (1, w, 4), dtype=np.uint8)
        if k - 1 >= PNG.BLANK_RUN_MIN:
            blank.append((r + 1, r + k))
        r += k
    img[..., 3] = 255
    if rgba:
        img[:, 7, 3] = 40  # translucent in every row: RGBA rows, the runs kept
    c = 4 if rgba else 3
    png = PNG.png_bytes(img, 110)
    assert (pixels(png) == img).all()
    want = np.empty((h, w * c + 1), np.uint8)
    want[:, 0] = 2
    px = img[..., :c].reshape(h, -1)
    want[0, 1:] = px[0]
    want[1:, 1:] = px[1:] - px[:-1]
    assert (_idat_rows(png, h, w * c + 1) == want).all()
    assert PNG._blank_runs(want) == blank and (6, 10) in blank and (2, 5) not in blank
    assert (54, 94) in blank and blank[-1][1] < h  # 40 rows across a block's end; the last 3 rows left to zlib


def test_blank_rows_adler32_and_segments():
    """The Adler-32 continued over blank rows (filter type 2, then zeros) and their copied deflate segments against
    zlib's own, for widths that make B and A wrap past 65,521."""
    for n, k, start in ((13, 1, 1), (3001, 17, 1), (12055, 40, 0x2F3A11C5), (70001, 3, 7)):
        rows = (b"\x02" + bytes(n - 1)) * k
        assert PNG._adler_blank(start, n, k) == zlib.adler32(rows, start)
        d = zlib.decompressobj(-15)
        assert d.decompress(PNG._blank_deflate(n, k)) == rows and not d.eof  # no final block: the stream goes on


def _small_pipeline() -> Timeline:
    spans = []
    for r in range(3):
        t = r * 1e-3
        for op, d in (("F", 1e-3), ("B", 2e-3)):
            for mb in range(4):
                spans.append(Span(f"{op}{r}.{mb}@r{r}", f"{op}{r}.{mb}", r, "s0", "matmul", "compute", t, t + d,
                                  tags={"pp_op": op, "stage": r, "mb": mb}))
                t += d
        spans.append(Span(f"ar@r{r}", "ar", r, "c", "all_reduce", "comm", t - 3e-3, t + 1e-3))
    return Timeline("pp", "predict", 3, spans=spans)


@pytest.mark.parametrize("chart", ["gantt", "steps", "time", "rotated"])
def test_charts_are_the_pixels_of_matplotlibs_agg_canvas_and_png_writer(tmp_path, chart):
    tl = _small_pipeline()

    def figure():
        if chart == "gantt":
            return G.draw_gantt([("predicted", tl)], "pp: makespan")
        if chart in ("steps", "time"):
            return P.draw_pipeline(tl, "pp", mode=chart)
        # text the fast path hands back to matplotlib: rotated, and mathtext
        fig = G.draw_gantt([("predicted", tl)], r"$\alpha^2$ makespan")
        fig.axes[0].set_ylabel("lanes (rotated)")
        return fig

    ours = B.write_figure(figure(), tmp_path / "c.png").read_bytes()
    theirs = matplotlib_png(figure())
    assert ours != theirs  # not PIL's bytes ...
    assert pixels(ours).shape == pixels(theirs).shape and (pixels(ours) == pixels(theirs)).all()  # ... its pixels
    # the text went through the glyph cache (matplotlib 3.11's per-glyph rendering); the figure keeps its own
    # canvas (and no renderer's pixels)
    B._AggGlyphs.layouts.clear()
    fig = figure()
    canvas = fig.canvas
    B.write_figure(fig, tmp_path / "d.png")
    assert fig.canvas is canvas
    if B._AggGlyphs.usable():
        assert B._AggGlyphs.layouts


def test_text_cached_under_other_font_settings_is_not_reused(tmp_path):
    # the same FontProperties ("sans-serif", 10 pt) is another font under another font.sans-serif: a chart drawn
    # under it, and one drawn after it under the defaults again, are matplotlib's pixels (the text of the chart
    # before it not reused)
    import matplotlib

    tl = _small_pipeline()

    def same() -> bool:
        ours = pixels(B.write_figure(G.draw_gantt([("predicted", tl)], "pp"), tmp_path / "c.png").read_bytes())
        theirs = pixels(matplotlib_png(G.draw_gantt([("predicted", tl)], "pp")))
        return ours.shape == theirs.shape and bool((ours == theirs).all())

    assert same()
    with matplotlib.rc_context({"font.sans-serif": ["DejaVu Serif"]}):
        assert same()
    assert same()


def _child_lays_out_with_its_own_fonts(tmp: str) -> bool:
    """In a forked child: draw the parent's chart again; whether every font its text layouts hold is the one
    matplotlib's font cache gives this process (DejaVu Sans, the chart's one font). The parent's FT2Fonts read their
    file through a descriptor the two processes share, which is why matplotlib empties that cache in a forked
    child (``font_manager._get_font``)."""
    from matplotlib.font_manager import FontProperties, fontManager, get_font

    B.write_figure(G.draw_gantt([("predicted", _small_pipeline())], "pp"), Path(tmp) / "child.png")
    own = get_font(fontManager._find_fonts_by_props(FontProperties()))
    return bool(B._AggGlyphs.layouts) and all(
        f is own for _size, items in B._AggGlyphs.layouts.values() for f, *_ in items)


def test_a_forked_child_lays_text_out_with_its_own_fonts(tmp_path):
    import multiprocessing
    import os

    if not hasattr(os, "register_at_fork") or not B._AggGlyphs.usable():
        pytest.skip("no fork, or matplotlib without per-glyph text rendering")
    B.write_figure(G.draw_gantt([("predicted", _small_pipeline())], "pp"), tmp_path / "parent.png")
    assert B._AggGlyphs.layouts
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_child_lays_out_with_its_own_fonts, (str(tmp_path),))


def test_another_thread_lays_text_out_with_its_own_fonts(tmp_path):
    # matplotlib gives each thread its own FT2Fonts (font_manager._get_font keys on the thread): the glyph path sets
    # a font's size and transform, then renders, so two threads drawing with one font would mix their glyphs
    import threading

    from matplotlib.font_manager import FontProperties, fontManager, get_font

    if not B._AggGlyphs.usable():
        pytest.skip("matplotlib without per-glyph text rendering")
    B.write_figure(G.draw_gantt([("predicted", _small_pipeline())], "pp"), tmp_path / "main.png")
    got = []

    def draw() -> None:
        B.write_figure(G.draw_gantt([("predicted", _small_pipeline())], "pp"), tmp_path / "thread.png")
        own = get_font(fontManager._find_fonts_by_props(FontProperties()))
        got.append(any(f is own for _size, items in B._AggGlyphs.layouts.values() for f, *_ in items))

    t = threading.Thread(target=draw)
    t.start()
    t.join()
    assert got == [True]


def test_a_chart_written_leaves_pyplot_unimported():
    # reading every rcParam (rcParams.items()) resolves the automatic backend, importing pyplot (~0.4 s)
    import subprocess
    import sys

    code = ("import sys, tempfile, pathlib; from tests.report.test_chart_png import _small_pipeline; "
            "from schedsim.report import chart_base as B, gantt as G; "
            "B.write_figure(G.draw_gantt([('p', _small_pipeline())], 'pp'), "
            "pathlib.Path(tempfile.mkdtemp()) / 'c.png'); print('matplotlib.pyplot' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_text_metrics_are_matplotlibs_and_shared_between_renderers():
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties

    if not B._AggGlyphs.usable():
        pytest.skip("matplotlib without per-glyph text rendering")
    canvas = B._agg_canvas()(Figure(dpi=110))
    r = canvas.get_renderer()
    prop = FontProperties(size=7)
    plain = RendererAgg(100, 100, 110)
    for text in ("rank 17 (stage 17,49)", "makespan 341.975 ms", "W"):
        assert r.get_text_width_height_descent(text, prop, False) == plain.get_text_width_height_descent(
            text, prop, False)
        assert (text, prop, 110, r.glyphs.setting) in B._AggGlyphs.metrics
    # another canvas of the same dpi finds them (a pipeline's two charts share their labels)
    other = B._agg_canvas()(Figure(dpi=110)).get_renderer()
    assert other is not r and other.glyphs.metrics is r.glyphs.metrics


def test_a_raster_drawn_again_on_the_same_pixels_is_painted_once(tmp_path, monkeypatch):
    # a Gantt past RASTER_MIN_BOXES written as PNG then SVG: the SVG's raster is the PNG's image
    monkeypatch.setattr(G, "RASTER_MIN_BOXES", 0)
    calls = []
    paint = B._paint
    monkeypatch.setattr(B, "_paint", lambda *a: calls.append(1) or paint(*a))
    G.write_gantt(tmp_path / "g", [("predicted", _small_pipeline())], "pp")
    assert len(calls) == 1


def test_text_layout_line_metrics_are_matplotlibs():
    # the renderer's _get_font_height_metrics (a font's ascent, descent and line gap, looked up once) gives
    # Text._get_layout what it reads from the font's tables itself: the same layout of one- and three-line texts,
    # at several sizes, weights, families and dpis, and under another font.sans-serif
    import matplotlib
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.figure import Figure

    if not B._AggGlyphs.usable():
        pytest.skip("matplotlib without per-glyph text rendering")

    def layouts(fig: Figure, renderer) -> list:
        return [(bbox.bounds, lines, box) for bbox, lines, box in (t._get_layout(renderer) for t in fig.texts)]

    def check() -> None:
        for dpi in (72, 110, 200):
            fig = Figure(dpi=dpi)
            for k, (size, weight, family) in enumerate([(7, "normal", "sans-serif"), (9, "bold", "sans-serif"),
                                                        (12, "normal", "serif"), (8, "normal", "monospace")]):
                for j, text in enumerate(("rank 3 (stage 3,7)", "a\nbc\nlp", "W")):
                    fig.text(0.1 + 0.2 * j, 0.1 + 0.2 * k, text, fontsize=size, fontweight=weight, family=family)
            ours = B._agg_canvas()(fig).get_renderer()
            got = layouts(fig, ours)
            want = layouts(fig, RendererAgg(ours.width, ours.height, dpi))
            assert hasattr(ours, "_get_font_height_metrics") and got == want

    check()
    with matplotlib.rc_context({"font.sans-serif": ["DejaVu Serif"]}):
        check()
    assert B._AggGlyphs.heights
