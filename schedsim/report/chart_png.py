"""The charts' PNG writer: :func:`png_bytes`, the pixels of an Agg canvas as matplotlib's PIL writer encodes them (the
same pixels), rows filtered by numpy and runs of blank rows deflated once (``chart_base._agg_canvas`` writes every
PNG chart through it)."""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["png_bytes"]


def png_bytes(rgba: Any, dpi: float, metadata: dict[str, Any] | None = None) -> bytes:
    """The PNG file of an image (uint8, rows × columns × 4, RGBA, top row first) as matplotlib's Agg canvas writes it
    (``print_png``: PIL's writer), pixel for pixel: a ``tEXt`` chunk ``Software`` naming matplotlib, then one per
    ``metadata`` key whose value is not None (``iTXt``, UTF-8, where the value is not Latin-1), ``pHYs`` of ``dpi``
    (pixels per metre, rounded as PIL does), the pixels as RGB (colour type 2) when every alpha is 255, else RGBA
    (type 6). Each row is filtered by PNG filter 2, "Up" (the byte above subtracted; a chart's lanes repeat their
    rows, so most filtered bytes are 0), and deflated at zlib level 3, ~1 MB of rows at a time (PNG specification,
    ISO/IEC 15948, §9 filtering, §11 chunks); a run of :data:`BLANK_RUN_MIN` or more rows equal to the row above
    (all filtered bytes 0) is written as copies of a deflate segment made once per row width (:func:`_blank_deflate`,
    the rows before it ended by a full flush), and the zlib stream's Adler-32 computed here. Level 3 is zlib's
    fast matcher (``deflate_fast``, levels 1-3), several times faster than PIL's default level 6 on lane charts
    for somewhat larger files (measured on pp=32's charts: docs/validation.md, "fast38o" and "pp=32: gantt.svg on
    request past 100,000 ops")."""
    import struct
    import zlib

    import matplotlib
    import numpy as np
    from PIL import Image

    rgba = np.ascontiguousarray(rgba, np.uint8)
    h, w = rgba.shape[:2]
    step = max(1, (1 << 20) // (w * 4 + 1))  # rows per block: ~1 MB at a time, not the image
    words = rgba.view("<u4")[..., 0]  # a pixel's four bytes as one little-endian word: alpha its top byte
    opaque = all(bool((words[r0:r0 + step] >= 0xFF000000).all()) for r0 in range(0, h, step))
    c = 3 if opaque else 4
    deflate = zlib.compressobj(3, zlib.DEFLATED, -15)  # raw deflate: the zlib header and Adler-32 written here
    idat = [b"\x78\x5e"]  # zlib's header of level 3 (RFC 1950: 32 KiB window, FLEVEL 1), as zlib.compress(.., 3)
    adler = 1
    prev = None
    for r0 in range(0, h, step):
        px = rgba[r0:r0 + step]  # contiguous: the subtraction below 2x as fast as on a strided view
        if opaque:  # the alpha bytes dropped by PIL's RGBA -> RGB conversion: half the time of numpy's strided copy
            px = np.asarray(Image.frombuffer("RGBA", (w, len(px)), px, "raw", "RGBA", 0, 1).convert("RGB"))
        rows = np.empty((len(px), w * c + 1), np.uint8)  # each row: its filter type, then its filtered bytes
        rows[:, 0] = 2
        body = rows[:, 1:].reshape(len(px), w, c)  # a view: the pixels written in place
        body[0] = px[0] if prev is None else px[0] - prev
        np.subtract(px[1:], px[:-1], out=body[1:])
        prev = px[-1]
        done = 0
        for a, b in _blank_runs(rows):  # rows equal to the row above: their deflate blocks made once, copied
            idat += [deflate.compress(rows[done:a].data), deflate.flush(zlib.Z_FULL_FLUSH)]
            adler = zlib.adler32(rows[done:a].data, adler)
            idat.append(_blank_deflate(w * c + 1, b - a))
            adler = _adler_blank(adler, w * c + 1, b - a)
            done = b
        idat.append(deflate.compress(rows[done:].data))
        adler = zlib.adler32(rows[done:].data, adler)
    idat += [deflate.flush(), struct.pack(">I", adler)]

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    out = [b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2 if opaque else 6, 0, 0, 0))]
    texts = {"Software": f"Matplotlib version{matplotlib.__version__}, https://matplotlib.org/", **(metadata or {})}
    for k, v in texts.items():
        if v is None:
            continue
        key = k.encode("latin-1") if isinstance(k, str) else k
        if isinstance(v, bytes):
            out.append(chunk(b"tEXt", key + b"\0" + v))
            continue
        try:
            out.append(chunk(b"tEXt", key + b"\0" + v.encode("latin-1", "strict")))
        except UnicodeError:
            out.append(chunk(b"iTXt", key + b"\0\0\0\0\0" + v.encode("utf-8")))
    ppm = int(dpi / 0.0254 + 0.5)
    out.append(chunk(b"pHYs", struct.pack(">IIB", ppm, ppm, 1)))
    out.append(chunk(b"IDAT", b"".join(idat)))
    out.append(chunk(b"IEND", b""))
    return b"".join(out)


#: Fewest rows equal to the row above, one after another, that :func:`png_bytes` writes as copies of a deflate
#: block made once (:func:`_blank_deflate`); shorter runs go through zlib with their neighbours.
BLANK_RUN_MIN = 4


def _blank_runs(rows: Any) -> list[tuple[int, int]]:
    """The runs [a, b) of at least :data:`BLANK_RUN_MIN` rows of ``rows`` (PNG rows: a filter type byte, then the
    filtered bytes) whose filtered bytes are all 0, in order."""
    import numpy as np

    blank = ~rows[:, 1:].any(axis=1)
    if not blank.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], blank.view(np.int8), [0]])))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True) if b - a >= BLANK_RUN_MIN]


@functools.lru_cache(maxsize=64)
def _blank_block(n: int, k: int) -> bytes:
    """A raw deflate segment (RFC 1951) of ``k`` rows of ``n`` bytes, each the filter type 2 ("Up") then
    ``n`` − 1 zero bytes: deflated at level 3 by a fresh compressor and ended by a full flush, so it refers to no
    byte before it, ends on a byte boundary, and may follow any segment that ended so."""
    import zlib

    d = zlib.compressobj(3, zlib.DEFLATED, -15)
    return d.compress((b"\x02" + bytes(n - 1)) * k) + d.flush(zlib.Z_FULL_FLUSH)


def _blank_deflate(n: int, k: int) -> bytes:
    """Raw deflate segments of ``k`` blank PNG rows of ``n`` bytes (:func:`_blank_block`): copies of the segment of
    16 rows, then one of the rest: deflating long runs of zero bytes was a large share of the PNGs' deflate on
    pipeline charts (docs/validation.md, "pp=32: gantt.svg on request past 100,000 ops")."""
    whole, rest = divmod(k, 16)
    return _blank_block(n, 16) * whole + (_blank_block(n, rest) if rest else b"")


def _adler_blank(adler: int, n: int, k: int) -> int:
    """Adler-32 (RFC 1950 §8.2) ``adler`` continued over ``k`` blank rows of ``n`` bytes (2, then ``n`` − 1 zeros):
    per row, A += 2 and B += A + (n − 1)·A' with A' the new A; zeros add nothing to A. Modulo 65,521."""
    m = 65521
    a, b = adler & 0xFFFF, adler >> 16
    for _ in range(k):
        a = (a + 2) % m
        b = (b + n * a) % m
    return (b << 16) | a
