"""A bounded streaming reader for Chrome/Kineto trace JSON (plain or gzip).

A Kineto trace is one JSON object whose ``traceEvents`` array holds almost all
of the bytes. :class:`TraceEventStream` walks the top-level object key by key,
hands out the elements of ``traceEvents`` (one at a time, or in runs:
:meth:`~TraceEventStream.batches`) and keeps every other
top-level value (``distributedInfo``, ``baseTimeNanoseconds`` ...) in
:attr:`TraceEventStream.header`. A top-level array (the Chrome "JSON Array
Format", which some nsys-to-JSON converters write) is read the same way.

Memory stays bounded by the read chunk (1 MiB of text), a run of events
(:data:`RUN_CHARS`, 4 Mi characters) and the largest single value being decoded.
The events are decoded in runs (:meth:`TraceEventStream.batches`): the text up to
the last event boundary (``}`` then ``,`` and ``{``) of the next 4 Mi characters
is decoded as one JSON array by the C-accelerated ``json.JSONDecoder``, one call
for ~20,000 events instead of a Python step per event (the cost of reading a
1 GB trace, ``docs/validation.md``, "Import + replay of a 1 GB trace"). A run
that does not decode (the boundary was inside a string, or the text is
malformed) is decoded again one value at a time with ``raw_decode``, which reads
exactly what a run would and words the error, so a run changes the speed and
nothing else: if ``[TEXT]`` is valid JSON and ``TEXT`` is a prefix of the
event array ending in ``}``, then ``TEXT`` is a list of whole events.
orjson is not used here: it reads every number as a float, and quoting the
long ones first (the exact timestamps of :mod:`schedsim.trace.kineto`) costs
more than its faster decoding saves (measured: ``docs/validation.md``, "Import
+ replay of a 1 GB trace").

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

__all__ = ["TraceEventStream", "keep_long", "open_text"]

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
#: Characters of event text decoded in one call (:meth:`TraceEventStream.batches`).
RUN_CHARS = 4 << 20
#: What follows the ``}`` that ends an event of the array: the next event or the array's end.
_AFTER_EVENT = re.compile(r"[ \t\n\r]*(?:,[ \t\n\r]*\{|\])")


def keep_long(text: str) -> float | str:
    """JSON ``parse_float``: a float, or the text itself when a float cannot hold it exactly (more than 15
    characters: a double keeps 15-17 significant digits; :mod:`schedsim.trace.kineto` converts the text to exact
    integer nanoseconds).

    >>> keep_long("1.5"), keep_long("4458676522690.655")
    (1.5, '4458676522690.655')
    """
    return text if len(text) > 15 else float(text)


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
    long_floats_as_text : bool
        Numbers with a fraction or exponent longer than 15 characters stay their text (:func:`keep_long`), so a
        reader can convert them exactly; shorter ones are floats.
    run_chars : int, optional
        Characters of events decoded in one call (default :data:`RUN_CHARS`; module docstring); 1 decodes one
        event at a time.

    Attributes
    ----------
    header : dict
        Top-level keys other than ``traceEvents``; complete after iteration.
    n_events : int
        While an event (or a run, :meth:`batches`) is handed out: the position of that event (the run's first) in
        the event array; after iteration: the number of events.

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

    def __init__(self, path: str | Path, chunk_chars: int = _CHUNK, long_floats_as_text: bool = False,
                 run_chars: int | None = None) -> None:
        self.path = Path(path)
        self.chunk = chunk_chars
        self.run_chars = RUN_CHARS if run_chars is None else run_chars
        self.header: dict[str, Any] = {}
        self.n_events = 0
        self._dec = json.JSONDecoder(parse_float=keep_long) if long_floats_as_text else json.JSONDecoder()
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
    def _run(self) -> tuple[list[Any] | None, int]:
        """Decode the events up to the last event boundary in the next :attr:`run_chars` characters as one JSON
        array: ``(events, end)``, the buffer moved past them; ``(None, end)`` when there is no boundary or the
        text up to it does not decode (``end``: the offset up to which values are decoded one at a time)."""
        if len(self._s) - self._i < self.run_chars and not self._eof:
            self._fill(at_least=self.run_chars)
        s, i = self._s, self._i
        j = min(len(s), i + self.run_chars)
        for _ in range(256):  # the last '}' followed by ", {" or "]"; an event nests a few objects at most
            j = s.rfind("}", i, j)
            if j < 0 or _AFTER_EVENT.match(s, j + 1):
                break
        else:
            j = -1
        if j < 0:  # one event longer than a run, or not an array of objects
            return None, self._consumed + min(len(s), i + self.run_chars)
        end = self._consumed + j + 1
        try:
            run = self._dec.decode("[" + s[i:j + 1] + "]")
        except (ValueError, RecursionError):  # JSONDecodeError, an integer too long: decoded one at a time
            return None, end
        self._i = j + 1
        return run, end

    def batches(self) -> Iterator[list[Any]]:
        """The events as lists (runs of ~:attr:`run_chars` characters, or one event), in file order.

        While a list is handed out, :attr:`n_events` is the position of its first event.

        Raises
        ------
        TraceError
            As iterating does.
        """
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

    def _array(self) -> Iterator[list[Any]]:
        c = self._skip_ws()
        if c == "]":
            self._i += 1
            return
        one_by_one = -1  # decode single values up to this offset (a run there did not decode)
        while True:
            run = None
            if self._offset() >= one_by_one:
                run, one_by_one = self._run()
            if run is None:
                run = [self._value()]
            yield run
            before = self.n_events
            self.n_events += len(run)
            if self.n_events // PROGRESS_EVERY > before // PROGRESS_EVERY:
                print(f"{self.path}: read {self.n_events:,} events ({self._offset() / 1e6:,.0f} M characters)",
                      file=sys.stderr, flush=True)
            if self._expect(",]", "',' or ']' in the event array") == "]":
                return

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for run in self.batches():
            base = self.n_events
            for k, e in enumerate(run):
                self.n_events = base + k
                yield e
            self.n_events = base
