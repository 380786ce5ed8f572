"""Output files written atomically: a reader never sees a half-written file, and an interrupted
run (Ctrl-C included) leaves what was there before.

Every file schedsim writes (timelines, traces, charts, profiles, reports) goes through these.
A file is written to a temporary name in its own folder and renamed into place with
``os.replace``, which POSIX makes atomic within one file system; the new file gets the mode a
plain ``open()`` would give it under the current umask.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_writer", "output_set"]


@contextmanager
def atomic_writer(path: str | Path, mode: str = "w") -> Iterator[Any]:
    """Open a temporary file beside ``path``; on success give it the umask's mode and rename it into place.

    A reader never sees a half-written file; on any exception (Ctrl-C included) the temporary file is
    removed and ``path`` keeps what it had.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the mode a plain open() would
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    A reader never sees a half-written file, and an interrupted write leaves
    the old file (or none) in place.
    """
    with atomic_writer(path, "wb") as f:
        f.write(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def _commit_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder ``out`` itself while a set is moved in (POSIX; elsewhere a
    no-op; no lock file is left behind).

    The moves are atomic one file at a time; without the lock two runs finishing together could leave
    one's gantt.png beside the other's timeline.json.
    """
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    try:
        fd = os.open(out, os.O_RDONLY)
    except OSError:  # not openable: the moves fail next, with their own error
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without flock (some network mounts): go on unlocked
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def output_set(outdir: str | Path, replaces: tuple[str, ...] = ()) -> Iterator[Path]:
    """Write a set of output files all or nothing, replacing the set an earlier run left.

    Yields a staging folder inside ``outdir``; when the block finishes, every file in it is
    moved into ``outdir`` (``os.replace``, atomic per file), then files an earlier run wrote there
    and this one did not are removed (:func:`schedsim.report.outdir.finish_set`; ``replaces`` names
    the command's possible outputs, removed only from a folder that already held a schedsim set). If the
    block raises, or the user presses Ctrl-C, the staging folder is removed and ``outdir`` keeps what it had. Staging folders of killed runs are removed
    (:func:`schedsim.report.outdir.clean_stale_staging`).

    Raises
    ------
    OSError
        ``outdir`` cannot be created (e.g. it names an existing file).
    """
    from schedsim.report.outdir import clean_stale_staging, finish_set, staging_prefix, written_by_schedsim

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    if not written_by_schedsim(out):  # a folder of the user's own files: remove none of them
        replaces = ()
    clean_stale_staging(out)
    stage = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=out))
    try:
        yield stage
        with _commit_lock(out):  # two runs into one folder: one whole set after the other, never a mix
            names = []
            for f in sorted(stage.iterdir()):
                os.replace(f, out / f.name)
                names.append(f.name)
            finish_set(out, names, replaces)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


# --------------------------------------------------------------------------------------------------------------
# Inputs: one reader discipline for every file schedsim reads.

#: Largest input of each kind, in bytes (``SCHEDSIM_MAX_INPUT_BYTES`` overrides them all). Sized well above the
#: largest valid input of the kind the tools are timed on: a 1M-op literal schedule is ~70 MB, a 1M-op timeline
#: (row layout) ~250 MB, a 1M-event Kineto trace ~130 MB; a profile or a pipeline CSV is kilobytes, and an
#: nccl-tests log of all 12 binaries ~50 kB (4 MiB, ~45,000 rows, parse in ~5 s).
INPUT_MAX_BYTES: dict[str, int] = {
    "schedule": 512 << 20,
    "profile": 16 << 20,
    "csv": 256 << 20,
    "timeline": 4 << 30,
    "nccl-tests log": 4 << 20,
    "kineto": 8 << 30,
    "nsys": 32 << 30,
    "trace": 32 << 30,  # a file of one of the trace kinds, before its kind is known (``analyze``)
}

StrPath = str | os.PathLike[str]

#: Deepest nesting of JSON arrays/objects an input may use (orjson's own limit is 1024; the standard library's
#: parser recurses per level, and so do the readers after it).
MAX_JSON_DEPTH = 256


#: What a missing input of a kind is called and how to fix it (default: "no such file", check the path).
_MISSING: dict[str, tuple[str, str]] = {
    "schedule": ("no such file", "check the path; shipped schedules are in schedules/"),
    "profile": ("no such profile file", "check the path, or use a shipped profile (`schedsim profiles` lists them)"),
}


def _error_class(kind: str) -> type[Exception]:
    from schedsim.errors import ProfileError, SchedsimError, SpecError, TraceError

    return {"schedule": SpecError, "profile": ProfileError, "timeline": TraceError, "kineto": TraceError,
            "nsys": TraceError, "trace": TraceError}.get(kind, SchedsimError)


def input_error(kind: str, path: StrPath, message: str, fix: str, line: int | None = None,
                column: int | None = None) -> Exception:
    """The error of ``kind``'s reader (:class:`~schedsim.errors.SpecError` for a schedule,
    :class:`~schedsim.errors.ProfileError` for a profile, :class:`~schedsim.errors.TraceError` for a timeline or
    trace, else :class:`~schedsim.errors.SchedsimError`), worded ``PATH[:LINE[:COLUMN]]: message`` with ``fix``."""
    from schedsim.errors import SpecError, printable

    cls = _error_class(kind)
    if cls is SpecError:
        return SpecError(message, file=printable(str(path)), line=line, column=column, fix=fix)
    where = printable(str(path)) + "".join(f":{n}" for n in (line, column) if n is not None)
    return cls(f"{where}: {message}", fix=fix)  # type: ignore[call-arg]


def max_input_bytes(kind: str) -> int:
    """The size cap of inputs of ``kind`` (:data:`INPUT_MAX_BYTES`), or ``SCHEDSIM_MAX_INPUT_BYTES`` if set.

    Raises
    ------
    SchedsimError
        ``SCHEDSIM_MAX_INPUT_BYTES`` is not a positive integer.
    """
    return env_number("SCHEDSIM_MAX_INPUT_BYTES", INPUT_MAX_BYTES.get(kind, 256 << 20), integer=True, low=1)


def env_number(name: str, default: float, *, integer: bool = False, low: float = 0.0,
               high: float = float("inf")) -> Any:
    """The number in environment variable ``name`` (``default`` when unset or empty): an int if ``integer``.

    Raises
    ------
    SchedsimError
        The variable holds something other than a finite number in ``[low, high]``, naming the variable.
    """
    import math

    from schedsim.errors import SchedsimError, printable

    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        val: float = int(raw.strip().replace("_", "")) if integer else float(raw)
    except ValueError:
        val = float("nan")
    if not (math.isfinite(val) and low <= val <= high):
        what = "an integer" if integer else "a number"
        rng = f" from {low:g}" + (f" to {high:g}" if math.isfinite(high) else "")
        raise SchedsimError(f"environment variable {name}={printable(raw, 60)!r} is not {what}{rng}",
                            fix=f"set {name} to {what}{rng} (default {default:g}), or unset it")
    return val


def _describe_mode(mode: int) -> str:
    import stat

    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def check_input(path: StrPath, kind: str) -> os.stat_result:
    """Check that ``path`` is a regular, non-empty file of at most :func:`max_input_bytes` bytes, without opening
    it (for readers that open by name, such as SQLite); returns its ``os.stat`` result.

    Raises
    ------
    SchedsimError
        Of ``kind``'s class (see :func:`input_error`): missing, unreadable, not a regular file (a folder, FIFO,
        device or socket), empty, or past the size cap; the message names the path and the fix.
    """
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        what, fix = _MISSING.get(kind, ("no such file", f"check the path of the {kind} file"))
        raise input_error(kind, path, what, fix) from None
    except OSError as e:
        raise input_error(kind, path, f"cannot read it ({e.strerror or e})",
                          f"pass a readable {kind} file") from None
    if not stat.S_ISREG(st.st_mode):
        raise input_error(kind, path, f"is {_describe_mode(st.st_mode)}, not a regular file",
                          f"pass a regular {kind} file (save a stream to a file first)")
    if st.st_size == 0:
        raise input_error(kind, path, "is empty", f"pass a {kind} file with content (was it written completely?)")
    cap = max_input_bytes(kind)
    if st.st_size > cap:
        raise input_error(kind, path, f"is {st.st_size:,} bytes, past the {cap:,}-byte limit of a {kind} file",
                          "pass the right file; if you mean it, raise the limit with the environment variable "
                          f"SCHEDSIM_MAX_INPUT_BYTES={st.st_size}")
    return st


def open_input(path: StrPath, kind: str) -> Any:
    """Open an input file for reading in binary after :func:`check_input`; a stream for readers that parse as
    they read (a gzip trace). Opened with ``O_NONBLOCK`` (a FIFO swapped in after the check cannot block the
    open) and checked again on the open descriptor.

    Raises
    ------
    SchedsimError
        As :func:`check_input`.
    """
    import stat

    st = check_input(path, kind)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise input_error(kind, path, f"cannot read it ({e.strerror or e})", f"pass a readable {kind} file") from None
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            raise input_error(kind, path, "changed while it was being opened", f"pass a regular {kind} file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: StrPath, kind: str) -> bytes:
    """The bytes of an input file, read under :func:`open_input`'s checks (at most the size cap, even of a file
    that grows while it is read).

    Raises
    ------
    SchedsimError
        As :func:`check_input`.
    """
    cap = max_input_bytes(kind)
    with open_input(path, kind) as f:
        try:
            data: bytes = f.read(cap + 1)
        except OSError as e:
            raise input_error(kind, path, f"cannot read it ({e.strerror or e})",
                              f"pass a readable {kind} file") from None
    if len(data) > cap:
        raise input_error(kind, path, f"grew past the {cap:,}-byte limit of a {kind} file while it was read",
                          f"pass a {kind} file that is not being written")
    return data


def decode_utf8(data: bytes, where: StrPath, kind: str) -> str:
    """``data`` decoded as strict UTF-8 (a leading byte-order mark kept, as Python's ``utf-8`` codec keeps it).

    Raises
    ------
    SchedsimError
        Of ``kind``'s class: the bytes are not UTF-8; names the byte offset, line and column of the first bad
        byte.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise input_error(kind, where, f"not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start:,} "
                          f"({e.reason})", f"save the {kind} file as UTF-8 text (is it the right file?)",
                          line, col) from None


def read_text_input(path: StrPath, kind: str) -> str:
    """:func:`read_input` decoded by :func:`decode_utf8`. The one way schedsim reads a text input."""
    return decode_utf8(read_input(path, kind), path, kind)


def json_depth_ok(doc: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the lists/dicts of a parsed JSON document nest at most ``limit`` levels: an iterative walk that
    looks into a container only when a C-level ``set(map(type, ...))`` finds containers among its items, so a
    column of a million numbers costs one C loop."""
    if not isinstance(doc, (dict, list)):
        return True
    stack = [(doc, 1)]
    nested = (dict, list)
    while stack:
        node, d = stack.pop()
        items = node.values() if isinstance(node, dict) else node
        types = set(map(type, items))
        if dict in types or list in types:
            if d >= limit:
                return False
            stack.extend((c, d + 1) for c in items if isinstance(c, nested))
    return True


def parse_json(data: bytes | str, where: StrPath, kind: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse a JSON input (orjson when installed, else the standard library): the one JSON parser of inputs.

    Numbers past a float (``1e999``) stay infinite for the reader to refuse; an integer of more than 4,300
    digits is refused here (Python's ``int`` limit); nesting deeper than ``max_depth`` is refused.

    Raises
    ------
    SchedsimError
        Of ``kind``'s class: not UTF-8, not JSON (the message names the line and column and quotes at most a
        short escaped excerpt, none of a file that is no JSON document at all), or nested too deep.
    """
    import json

    from schedsim.errors import printable

    orjson: Any
    try:
        import orjson
    except ImportError:  # pragma: no cover - optional
        orjson = None
    doc: Any = None
    err: str | None = None
    if orjson is not None:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            err = "?"
        except RecursionError:
            err = "depth"
    if orjson is None or err == "?":  # NaN/Infinity tokens, which orjson refuses, or a real error
        text = decode_utf8(data, where, kind) if isinstance(data, bytes) else data  # json.loads guesses UTF-16/32
        try:
            doc = json.loads(text)
            err = None
        except json.JSONDecodeError as e:
            if e.doc.lstrip()[:1] not in ("{", "["):  # another kind of file: nothing of it is quoted
                err = "not JSON (it does not start with { or [; is it the right file?)"
            else:  # a JSON document broken at some point: a short escaped excerpt around it
                excerpt = printable(e.doc[max(0, e.pos - 30):e.pos + 30], 80)
                err = f"not valid JSON at line {e.lineno}, column {e.colno}: {e.msg} (near {excerpt!r})"
        except RecursionError:
            err = "depth"
        except ValueError as e:  # an integer past Python's digit limit
            err = f"not readable JSON ({printable(str(e), 160)})"
    if err == "depth" or (err is None and not json_depth_ok(doc, max_depth)):
        raise input_error(kind, where, f"the JSON nests arrays/objects more than {max_depth} levels deep",
                          f"pass a {kind} file written by the tool that makes them (is it the right file?)")
    if err is not None:
        raise input_error(kind, where, err, f"pass a complete {kind} file (it may be truncated; re-run the command "
                          "that wrote it)")
    return doc
