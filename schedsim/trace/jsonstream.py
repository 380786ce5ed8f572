"""A bounded streaming reader for Chrome/Kineto trace JSON (plain or gzip).

A Kineto trace is one JSON object whose ``traceEvents`` array holds almost all
of the bytes. :class:`TraceEventStream` walks the top-level object key by key,
hands out the elements of ``traceEvents`` one at a time and keeps every other
top-level value (``distributedInfo``, ``baseTimeNanoseconds`` ...) in
:attr:`TraceEventStream.header`. A top-level array (the Chrome "JSON Array
Format", which some nsys-to-JSON converters write) is read the same way.

Memory stays bounded by the read chunk (1 MiB of text) plus the largest single
value being decoded; each value is decoded by the C-accelerated
``json.JSONDecoder.raw_decode``, so no third-party parser is needed.

Caveat: Kineto writes ``baseTimeNanoseconds`` *after* ``traceEvents``, so
:attr:`~TraceEventStream.header` is complete only once the events have been
consumed.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from schedsim.errors import TraceError

__all__ = ["TraceEventStream", "open_text"]

_NON_WS = re.compile(r"[^ \t\n\r]")
_DELIM = " \t\n\r,]}:"
_CHUNK = 1 << 20
#: A single JSON value larger than this (in characters) is refused as malformed.
MAX_VALUE_CHARS = 256 << 20


#: A gzip trace may decompress to at most this many times its compressed size plus :data:`GZIP_SLACK` bytes.
#: Kineto JSON compresses 10-30x (``tests/data/kineto_execute_offload_h200_rank0.json.gz``: 15x); a 4 MB file
#: of 4 GB whitespace (1000x) is refused instead of read for minutes.
MAX_GZIP_RATIO = 200
GZIP_SLACK = 32 << 20
#: Events between progress lines on stderr (large traces take minutes).
PROGRESS_EVERY = 2_000_000


class _BoundedGzip(io.RawIOBase):
    """A gzip stream that raises TraceError once more than ``limit`` bytes have come out of it (``ratio``: the
    limit is the gzip-ratio bound, else the size cap :func:`schedsim.io.max_input_bytes` of ``kineto``)."""

    def __init__(self, path: Path, limit: int, ratio: bool = True) -> None:
        self._g = gzip.open(path, "rb")
        self._left = limit
        self._limit = limit
        self._path = path
        self._ratio = ratio

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self._g.readinto(b)
        self._left -= n
        if self._left < 0 and not self._ratio:
            raise TraceError(f"{self._path}: decompresses to more than {self._limit:,} bytes, past the limit for one "
                             "trace", fix="profile fewer steps (torch.profiler schedule with active=1), or raise the "
                             "limit with the environment variable SCHEDSIM_MAX_INPUT_BYTES")
        if self._left < 0:
            raise TraceError(f"{self._path}: decompresses to more than {self._limit:,} bytes, over "
                             f"{MAX_GZIP_RATIO}x its compressed size; not a plausible trace (a gzip bomb?)\n"
                             "  fix: pass the trace the profiler wrote; a real trace compresses 10-30x")
        return n

    def close(self) -> None:
        self._g.close()
        super().close()


def open_text(path: str | Path) -> TextIO:
    """Open a trace file as UTF-8 text, transparently gunzipping it.

    Gzip is detected from the magic bytes, not the file name.

    Raises
    ------
    TraceError
        If the file does not exist, cannot be opened, is not a regular file (a FIFO or device), or is larger
        than :func:`schedsim.io.max_input_bytes` of ``kineto`` (for gzip: decompresses to more).
    """
    from schedsim.io import check_input, max_input_bytes

    p = Path(path)
    cap = max_input_bytes("kineto")
    size = check_input(p, "kineto").st_size  # a regular, non-empty file within the size cap
    try:
        with open(p, "rb") as f:
            magic = f.read(2)
    except OSError as e:
        raise TraceError(f"{p}: cannot read ({e.strerror or e})") from None
    if magic == b"\x1f\x8b":
        by_ratio = size * MAX_GZIP_RATIO + GZIP_SLACK
        return io.TextIOWrapper(io.BufferedReader(_BoundedGzip(p, min(by_ratio, cap), ratio=by_ratio <= cap)),
                                encoding="utf-8")
    return open(p, encoding="utf-8")


class TraceEventStream:
    """Iterate the events of a Chrome/Kineto trace file without loading it whole.

    Parameters
    ----------
    path : str or Path
        ``.json`` or ``.json.gz`` (gzip detected from the content).
    chunk_chars : int
        Characters read per refill (default 1 Mi).

    Attributes
    ----------
    header : dict
        Top-level keys other than ``traceEvents``; complete after iteration.

    Raises
    ------
    TraceError
        (while iterating) for a truncated, corrupt or non-JSON file, with the
        character offset where reading stopped.

    Examples
    --------
    >>> import json, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.json")
    >>> _ = open(p, "w").write(json.dumps({"traceEvents": [{"ph": "X"}], "baseTimeNanoseconds": 5}))
    >>> s = TraceEventStream(p)
    >>> [e["ph"] for e in s], s.header["baseTimeNanoseconds"]
    (['X'], 5)
    """

    def __init__(self, path: str | Path, chunk_chars: int = _CHUNK) -> None:
        self.path = Path(path)
        self.chunk = chunk_chars
        self.header: dict[str, Any] = {}
        self.n_events = 0
        self._dec = json.JSONDecoder()
        self._f: TextIO | None = None
        self._s = ""
        self._i = 0
        self._eof = False
        self._consumed = 0  # characters dropped from the front of the buffer

    # -- low-level buffer -----------------------------------------------------
    def _fill(self, at_least: int = 0) -> bool:
        if self._eof:
            return False
        assert self._f is not None
        want = max(self.chunk, at_least)
        try:
            more = self._f.read(want)
        except (EOFError, OSError, zlib.error) as e:
            raise self._err(f"compressed data is corrupt or truncated ({e.__class__.__name__}: {e})") from None
        except UnicodeDecodeError as e:
            raise self._err(f"not UTF-8 text ({e.reason}); is this a trace JSON file?") from None
        self._consumed += self._i
        self._s = self._s[self._i:] + more
        self._i = 0
        if not more:
            self._eof = True
            return False
        return True

    def _offset(self) -> int:
        return self._consumed + self._i

    def _err(self, msg: str, fix: str | None = None) -> TraceError:
        head, sep, glued = msg.partition("\n  fix:")
        where = f"{self.path}: {head} (at character {self._offset()}, after {self.n_events} events)"
        if fix is not None:
            return TraceError(where, fix=fix)
        return TraceError(f"{where}{sep}{glued}")

    def _skip_ws(self) -> str:
        """Skip whitespace; return the next character without consuming it ('' at EOF)."""
        while True:
            m = _NON_WS.search(self._s, self._i)  # C speed: a megabyte of blanks is one call, not a Python loop
            if m is not None:
                self._i = m.start()
                return self._s[self._i]
            self._i = len(self._s)
            if not self._fill():
                return ""

    def _expect(self, chars: str, what: str) -> str:
        c = self._skip_ws()
        if c == "":
            raise self._err(f"file ends early while expecting {what}; the trace is truncated")
        if c not in chars:
            raise self._err(f"malformed JSON: expected {what}, found {c!r}")
        self._i += 1
        return c

    def _value(self) -> Any:
        self._skip_ws()
        while True:
            try:
                obj, end = self._dec.raw_decode(self._s, self._i)
            except RecursionError:
                raise self._err("JSON nested too deep (arrays or objects inside each other more than about "
                                f"{sys.getrecursionlimit()} levels); not a trace event\n  fix: pass a Chrome/Kineto trace JSON "
                                "as the profiler wrote it") from None
            except json.JSONDecodeError as e:
                if self._eof:
                    raise self._err(f"truncated or malformed JSON ({e.msg})") from None
                if len(self._s) - self._i > MAX_VALUE_CHARS:
                    raise self._err(f"malformed JSON ({e.msg}) in a value longer than {MAX_VALUE_CHARS} characters") from None
                self._fill(at_least=len(self._s) - self._i)
                continue
            except ValueError:  # an integer of more digits than int() converts (sys.get_int_max_str_digits)
                digits = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
                raise self._err(f"an integer of more than {digits:,} digits, too long to be a trace value",
                                fix="the trace is corrupt or was edited; re-export it from the profiler") from None
            if not self._eof and (end >= len(self._s) or (
                    not isinstance(obj, (dict, list, str)) and self._s[end] not in _DELIM
                    and len(self._s) - end < 64)):
                # a number or literal may continue in the next chunk ("1." then "5"): decode again with more text
                self._fill(at_least=len(self._s) - self._i)
                continue
            self._i = end
            return obj

    # -- iteration --------------------------------------------------------------
    def _array(self) -> Iterator[Any]:
        c = self._skip_ws()
        if c == "]":
            self._i += 1
            return
        while True:
            yield self._value()
            self.n_events += 1
            if self.n_events % PROGRESS_EVERY == 0:
                print(f"{self.path}: read {self.n_events:,} events ({self._offset() / 1e6:,.0f} M characters)",
                      file=sys.stderr, flush=True)
            if self._expect(",]", "',' or ']' in the event array") == "]":
                return

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            self._f = open_text(self.path)
        except OSError as e:  # pragma: no cover - open_text reports most cases
            raise TraceError(f"{self.path}: cannot open ({e})") from None
        try:
            first = self._skip_ws()
            if first == "":
                raise self._err("empty file; expected a JSON trace")
            if first == "[":
                self._i += 1
                yield from self._array()
            elif first == "{":
                self._i += 1
                if self._skip_ws() == "}":
                    self._i += 1
                else:
                    while True:
                        key = self._value()
                        if not isinstance(key, str):
                            raise self._err("malformed JSON: object key is not a string")
                        self._expect(":", "':' after an object key")
                        if key == "traceEvents":
                            self._expect("[", "the traceEvents array")
                            yield from self._array()
                        else:
                            self.header[key] = self._value()
                        if self._expect(",}", "',' or '}' in the top-level object") == "}":
                            break
            else:
                raise self._err(f"not a JSON trace: starts with {first!r}, expected '{{' or '['")
            if self._skip_ws() != "":
                raise self._err("unexpected data after the end of the JSON document")
        finally:
            self._f.close()
