"""Output files written atomically: a reader never sees a half-written file, and an interrupted
run (Ctrl-C included) leaves what was there before.

Every file schedsim writes (timelines, traces, charts, profiles, reports) goes through these.
A file is written to a temporary name in its own folder and renamed into place with
``os.replace``, which POSIX makes atomic within one file system; the new file gets the mode a
plain ``open()`` would give it under the current umask.

One gate, :func:`output_target`, decides where every output path goes (every ``--out``, ``-o``,
``--chrome`` of every command passes through :func:`atomic_writer`):

* ``-``, ``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``: standard output;
* ``/dev/null``: written nowhere (a sink, as for any Unix tool);
* a symbolic link: the file it points to is replaced, the link kept;
* a regular file, or nothing: replaced atomically;
* anything else (a folder, FIFO, socket, other device): refused (:class:`~schedsim.errors.SchedsimError`,
  exit 2), never replaced, truncated or renamed over.

A single-file output of a command (``schema -o``, ``calibrate --out`` and the raw ``.json`` beside it,
``analyze --chrome``) passes :func:`claim_file` too: an existing non-empty regular file there is replaced only
when it carries the mark of that command's output (:data:`OWN_MARKS`), as an output folder's file is replaced
only when its manifest records it (:mod:`schedsim.outdir`); a user's file is refused (exit 2) and left as it is.
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["STDOUT_NAMES", "STAGING_PREFIX", "OWN_MARKS", "atomic_write_bytes", "atomic_write_text", "atomic_writer",
           "claim_file", "describe_mode", "dumps_json", "is_own_file", "loads_json", "output_target", "refuse_input"]

#: Name prefix of the staging folders of :func:`schedsim.outdir.output_set`.
STAGING_PREFIX = ".schedsim-staging-"
#: Output paths that mean standard output.
STDOUT_NAMES = frozenset({"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"})
#: SHA-256 (hex) of files this process wrote into a staging folder with ``atomic_writer(..., digest=True)``, hashed
#: from the bytes as they were written, by the file's identity once in place (device, inode, size, modification and
#: change times in ns): :func:`schedsim.outdir.file_digest` takes them instead of reading the file back (a
#: million-op timeline.json is 100 MB). A few entries: cleared when full.
WRITTEN_DIGESTS: dict[tuple[int, int, int, int, int], str] = {}


def file_identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """``(device, inode, size, mtime_ns, ctime_ns)`` of a file's ``os.stat``: what any write changes (the change time
    cannot be set back), the key of :data:`WRITTEN_DIGESTS`."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class _Hashing:
    """A binary file whose ``write`` also feeds ``h`` (``atomic_writer``'s ``digest``); it offers ``write`` alone,
    so that no byte reaches the file unhashed."""

    def __init__(self, f: Any, h: Any) -> None:
        self._f, self._h = f, h

    def write(self, b: Any) -> int:
        self._h.update(b)
        return int(self._f.write(b))


def describe_mode(mode: int) -> str:
    """``a folder``, ``a symbolic link``, ``a FIFO``, ... for an ``st_mode``.

    >>> describe_mode(stat.S_IFIFO)
    'a FIFO'
    """
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return what
    return "a special file"


def output_target(path: str | Path, what: str = "output") -> Path | str:
    """Where an output named ``path`` goes: ``"stdout"``, ``"null"`` (``/dev/null``), or the regular file path
    to replace (a symbolic link's target, so the link stays).

    Raises
    ------
    SchedsimError
        ``path`` is a folder, FIFO, socket or device other than the two above (exit 2 on the command line).
    """
    from schedsim.errors import SchedsimError
    if str(path) in STDOUT_NAMES:
        return "stdout"
    p = Path(path)
    try:
        st = os.stat(p)  # follows links
    except FileNotFoundError:
        if p.is_symlink():
            raise SchedsimError(f"{what} {path}: a symbolic link to a missing file; not replaced",
                                fix="name a regular file, or - for standard output") from None
        return p
    except OSError:
        return p  # not reachable (permissions, a file as a parent): the write fails with the OS's reason
    if stat.S_ISREG(st.st_mode):
        return Path(os.path.realpath(p))
    if stat.S_ISCHR(st.st_mode) and os.path.samestat(st, os.stat(os.devnull)):
        return "null"
    raise SchedsimError(f"{what} {path}: is {describe_mode(st.st_mode)}, not a regular file; schedsim replaces only "
                        "regular files", fix="name a file to write (or - for standard output, /dev/null for none)")


#: How schedsim recognises its own earlier single-file output, by kind: what :func:`is_own_file` looks for.
#: ``schema``: a JSON object whose ``$id`` starts with ``https://schedsim.dev/schema/`` (``schedsim schema``) or
#: whose ``title`` is ``ScheduleSpec`` (``--expanded``: pydantic's title of the model); ``profile``: a first line
#: that is a ``#`` comment naming ``schedsim calibrate`` (the header of
#: :func:`executor.calibrate_logs.write_profile`'s two callers), and where its last line is a :data:`SEAL`, that
#: seal matching the bytes before it; ``calibration``: a JSON object whose first key is
#: ``"generator": "schedsim calibrate"`` (calibrate's raw measurements); ``chrome``: a file that starts
#: ``{"traceEvents":[`` and ends with ``"otherData":{"generator":"schedsim"`` in its last 64 KiB
#: (:func:`schedsim.report.chrome.write_chrome_trace`).
OWN_MARKS = {"schema": "a JSON Schema with $id https://schedsim.dev/schema/... or title ScheduleSpec",
             "profile": "a first line '# NAME: ... schedsim calibrate ...' and, since a seal, its last line's "
                        "SHA-256 of the rest (edited: the user's)",
             "calibration": 'a first key "generator": "schedsim calibrate"',
             "chrome": 'a trace ending with "otherData":{"generator":"schedsim",...}'}
#: The last line of a profile ``schedsim calibrate`` writes (:func:`sealed`): this prefix, then the SHA-256 of every
#: byte before the line. A profile whose seal no longer matches was edited since: the user's (:func:`is_own_file`).
SEAL = "# schedsim-sha256: "
#: The mark of calibrate's raw measurements (:data:`OWN_MARKS`): the first key of the JSON object it writes.
CALIBRATION_GENERATOR = "schedsim calibrate"
#: A schema file larger than this is not one ``schedsim schema`` wrote (it writes ~100 KiB).
_SCHEMA_MAX_BYTES = 8 << 20
_TAIL = 64 << 10


def _head_tail(p: Path, n: int) -> tuple[bytes, bytes]:
    with open(p, "rb") as f:
        head = f.read(n)
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - _TAIL))
        return head, f.read(_TAIL)


def sealed(text: str) -> str:
    """``text`` (ending in a newline) with its seal line appended: :data:`SEAL` and the SHA-256 of its UTF-8 bytes.

    >>> sealed("a: 1\\n").splitlines()[-1][:26]
    '# schedsim-sha256: 37b128c'
    """
    import hashlib

    return f"{text}{SEAL}{hashlib.sha256(text.encode('utf-8')).hexdigest()}\n"


def _seal_holds(p: Path) -> bool | None:
    """Whether the profile ``p``'s last line is a :data:`SEAL` matching the bytes before it; None when no line is a
    seal (an older schedsim's profile); False when lines follow the seal (added by the user)."""
    import hashlib

    if p.stat().st_size > _SCHEMA_MAX_BYTES:
        return False
    data = p.read_bytes()
    body, _nl, last = data.rstrip(b"\n").rpartition(b"\n")
    if not last.startswith(SEAL.encode()):
        return False if data.startswith(SEAL.encode()) or b"\n" + SEAL.encode() in data else None
    return hashlib.sha256(body + b"\n").hexdigest().encode() == last[len(SEAL):].strip()


def is_own_file(path: str | Path, kind: str) -> bool:
    """Whether the regular file ``path`` is schedsim's own earlier output of ``kind`` (a key of
    :data:`OWN_MARKS`), judged from its content as :data:`OWN_MARKS` says; an empty file counts as one (it holds
    nothing to lose). A file that cannot be read is not."""
    p = Path(path)
    try:
        if p.stat().st_size == 0:
            return True
        if kind == "schema":
            if p.stat().st_size > _SCHEMA_MAX_BYTES:
                return False
            doc = json.loads(p.read_bytes())
            return isinstance(doc, dict) and (str(doc.get("$id", "")).startswith("https://schedsim.dev/schema/")
                                              or doc.get("title") == "ScheduleSpec")
        head, tail = _head_tail(p, 4096)
    except (OSError, ValueError, RecursionError):
        return False
    if kind == "profile":  # sealed: unedited since (:func:`sealed`); an older, unsealed one: by its header
        first = head.split(b"\n", 1)[0]
        try:
            seal = _seal_holds(p)
        except OSError:
            return False
        return seal if seal is not None else first.startswith(b"# ") and b"schedsim calibrate" in first
    if kind == "calibration":
        import re

        mark = re.escape(json.dumps(CALIBRATION_GENERATOR).encode())
        return re.match(rb'\{\s*"generator":\s*' + mark, head) is not None
    if kind == "chrome":
        return head.startswith(b'{"traceEvents":[') and b'"otherData":{"generator":"schedsim"' in tail
    raise ValueError(f"unknown kind of output {kind!r}; one of {sorted(OWN_MARKS)}")


def claim_file(path: str | Path, kind: str, what: str = "output") -> Path | str:
    """:func:`output_target` of ``path``, refusing a regular file there that is not schedsim's own earlier output of
    ``kind`` (:func:`is_own_file`): a command replaces only a file it wrote itself, as in an output folder.

    Raises
    ------
    SchedsimError
        As :func:`output_target`, or ``path`` is an existing file schedsim did not write (exit 2 on the command
        line): nothing is written.
    """
    target = output_target(path, what)
    if isinstance(target, Path) and target.exists() and not is_own_file(target, kind):
        from schedsim.errors import SchedsimError, printable

        raise SchedsimError(f"{what} {printable(path)}: exists and is not schedsim's output (its {kind} files "
                            f"carry {OWN_MARKS[kind]}); not replaced",
                            fix="move or rename it, or name another file")
    return target


def refuse_input(out: str | Path, inputs: Iterable[str | Path], what: str = "output") -> None:
    """Refuse an output path that names one of the command's input files (``analyze t.json --chrome t.json``).

    Raises
    ------
    SchedsimError
        ``out`` is the same file as one of ``inputs`` (exit 2 on the command line).
    """
    from schedsim.errors import SchedsimError

    for i in inputs:
        try:
            same = os.path.samefile(out, i)
        except OSError:
            continue
        if same:
            raise SchedsimError(f"{what} {out}: is the input file {i}; not overwritten",
                                fix="write the output to another path")


class _Sink(io.RawIOBase):
    """A writable that keeps nothing (``/dev/null`` as an output)."""

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        return len(b)


def _own_file_target(path: str | Path) -> Path:
    """Where a file schedsim keeps for itself (an output folder's manifest, a file inside a staging folder) is
    written: ``path`` itself, never a link's target. A link there is replaced as the link (``os.replace`` renames
    over the link, not through it).

    Raises
    ------
    SchedsimError
        ``path`` is a folder, FIFO, socket or device.
    """
    from schedsim.errors import SchedsimError
    p = Path(path)
    try:
        mode = p.lstat().st_mode
    except OSError:
        return p
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return p
    raise SchedsimError(f"output {path}: is {describe_mode(mode)}, not a regular file; schedsim replaces only "
                        "regular files", fix="move it away, or write to another folder")


def _staging_root(p: Path) -> Path | None:
    """The staging folder (``.schedsim-staging-*``) that ``p`` lies in, if any."""
    return next((a for a in p.parents if a.name.startswith(STAGING_PREFIX)), None)


def _staging_gone(stage: Path) -> Exception:
    """The error of a run whose staging folder another process removed (exit 2): its set is incomplete."""
    from schedsim.errors import SchedsimError

    return SchedsimError(f"staging folder {stage} was removed while this run wrote into it (by another process); "
                         "nothing of this run is moved in", fix="run the command again")


@contextmanager
def atomic_writer(path: str | Path, mode: str = "w", *, follow_links: bool = True, digest: bool = False,
                  kind: str | None = None) -> Iterator[Any]:
    """Open a temporary file beside ``path``; on success give it the umask's mode and rename it into place.

    A reader never sees a half-written file; on any exception (Ctrl-C included) the temporary file is
    removed and ``path`` keeps what it had. ``path`` goes through :func:`output_target`: ``-`` writes to
    standard output, ``/dev/null`` nowhere, and a special file is refused. With ``follow_links=False``, and for
    every file inside a staging folder of :func:`output_set`, a symbolic link at ``path`` is replaced itself,
    never the file it points to. A staging folder is never created here: one that is gone (removed by another
    process) fails the write. ``digest`` (binary mode, a file inside a staging folder): the file given offers only
    ``write``, whose bytes are hashed on the way, and their SHA-256 is recorded in :data:`WRITTEN_DIGESTS` once the
    file is in place, for :func:`schedsim.outdir.output_set`'s manifest. ``kind`` (a key of :data:`OWN_MARKS`,
    outside a staging folder): a file at ``path`` is replaced only when it is schedsim's own output of that kind
    (:func:`claim_file`), checked before writing and again just before the rename.

    Raises
    ------
    SchedsimError
        ``path`` is a folder, FIFO, socket or device, or its staging folder was removed, or (``kind``) it is a
        file schedsim did not write.
    """
    staging = _staging_root(Path(path))
    own = not follow_links or staging is not None
    kind = None if own else kind
    target = (_own_file_target(path) if own else output_target(path) if kind is None
              else claim_file(path, kind))
    if target == "stdout" or target == "null":
        if target == "null":
            f: Any = _Sink() if "b" in mode else io.TextIOWrapper(io.BufferedWriter(_Sink()), encoding="utf-8")
        else:
            f = sys.stdout.buffer if "b" in mode else sys.stdout
        yield f
        f.flush()
        return
    p = Path(target)
    if staging is not None and not staging.is_dir():
        raise _staging_gone(staging)
    p.parent.mkdir(parents=True, exist_ok=True)
    import hashlib  # here: check and the other commands that write nothing do not import these (~1% of a cold check)
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    h = hashlib.sha256() if digest and staging is not None and "b" in mode else None
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f if h is None else _Hashing(f, h)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the mode a plain open() would
        if str(_own_file_target(p) if own else output_target(p)) != str(p):  # replaced while we wrote: leave it
            raise OSError(f"{p} changed into a special file while schedsim wrote it; not replaced")
        if kind is not None:  # a user's file put there while this run wrote: refused, kept
            claim_file(p, kind)
        os.replace(tmp, p)
        if h is not None:  # its identity in place (the rename changed its change time)
            if len(WRITTEN_DIGESTS) >= 64:
                WRITTEN_DIGESTS.clear()
            WRITTEN_DIGESTS[file_identity(os.lstat(p))] = h.hexdigest()
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_bytes(path: str | Path, data: bytes, *, follow_links: bool = True, kind: str | None = None
                       ) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    A reader never sees a half-written file, and an interrupted write leaves
    the old file (or none) in place. ``follow_links`` and ``kind`` as in :func:`atomic_writer`.
    """
    with atomic_writer(path, "wb", follow_links=follow_links, kind=kind) as f:
        f.write(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str, *, follow_links: bool = True, kind: str | None = None) -> None:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"), follow_links=follow_links, kind=kind)


#: Seconds a command waits for another process's lock on its output folder before it gives up (exit 2);
#: ``SCHEDSIM_LOCK_WAIT_S`` sets it. Moving a set in takes well under a second, so 10 s is a stuck holder.
LOCK_WAIT_S = 10.0


def _lock_holder(fd: int) -> str:
    """Who holds a ``flock`` on the open file ``fd``: ``pid N (command) on HOST`` from ``/proc/locks`` (Linux),
    else ``another process``."""
    import socket

    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return "another process"
    for line in lines:
        parts = line.split()
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK" or parts[5] != key:
            continue
        pid = parts[4]
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read(200).replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            cmd = ""
        cmd = "".join(c if c.isprintable() else "?" for c in cmd)[:80]
        return f"pid {pid}{f' ({cmd})' if cmd else ''} on {socket.gethostname()}"
    return "another process"


@contextmanager
def _commit_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder ``out`` itself while a set is moved in (POSIX; elsewhere a
    no-op; no lock file is left behind).

    The moves are atomic one file at a time; without the lock two runs finishing together could leave
    one's gantt.png beside the other's timeline.json. A lock another process holds is waited for at most
    ``SCHEDSIM_LOCK_WAIT_S`` seconds (:data:`LOCK_WAIT_S`), saying so on stderr.

    Raises
    ------
    SchedsimError
        The lock stayed held past the wait; the message names the holder (pid, command, host).
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
        _flock_bounded(fd, out, fcntl)
        yield
    finally:
        os.close(fd)  # releases the lock


def _flock_bounded(fd: int, out: Path, fcntl: Any) -> None:
    import time

    from schedsim.errors import SchedsimError

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    except OSError:  # a file system without flock (some network mounts): go on unlocked
        return
    raw = os.environ.get("SCHEDSIM_LOCK_WAIT_S", "")
    try:
        wait = float(raw) if raw else LOCK_WAIT_S
    except ValueError:
        raise SchedsimError(f"SCHEDSIM_LOCK_WAIT_S={raw[:40]!r} is not a number of seconds",
                            fix="unset it, or set e.g. SCHEDSIM_LOCK_WAIT_S=10") from None
    wait = min(max(wait, 0.0), 86400.0) if wait == wait else LOCK_WAIT_S
    holder = _lock_holder(fd)
    print(f"waiting up to {wait:g} s for the lock on output folder {out} (taken to move a set of outputs in), held "
          f"by {holder}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    raise SchedsimError(f"{out}: the output folder stayed locked for {wait:g} s by {_lock_holder(fd)}; nothing was "
                        "written there", fix="wait for that process to finish (or stop it), write elsewhere with "
                        "--out, or wait longer with SCHEDSIM_LOCK_WAIT_S=<seconds>")


def output_dir(outdir: str | Path, what: str = "--out", create: bool = True) -> Path:
    """``outdir`` as an output folder, created if missing (unless ``create`` is false).

    Raises
    ------
    SchedsimError
        ``outdir`` is ``-`` or names something other than a folder (a file, FIFO, device).
    """
    from schedsim.errors import SchedsimError
    if str(outdir) in STDOUT_NAMES:
        raise SchedsimError(f"{what} {outdir}: this command writes several files into a folder, not one stream",
                            fix="name a folder")
    out = Path(outdir)
    try:
        st = os.stat(out)
    except FileNotFoundError:
        if create:
            out.mkdir(parents=True, exist_ok=True)
        return out
    if not stat.S_ISDIR(st.st_mode):
        raise SchedsimError(f"{what} {outdir}: is {describe_mode(st.st_mode)}, not a folder",
                            fix="name a folder (it is created when missing)")
    return out


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


#: Default limits on the work one run may ask for (the table of :mod:`schedsim.spec.limits`). Keys are the
#: environment variables that override them (:func:`work_limit`).
WORK_LIMITS: dict[str, int] = {
    "SCHEDSIM_MAX_OPS": 2_000_000,
    # a 100k-rank all_reduce predicts in 16 s with charts; 1M ranks took > 90 s (2-core machine)
    "SCHEDSIM_MAX_RANKS": 100_000,
    "SCHEDSIM_MAX_CHARS": 200_000_000,
    "SCHEDSIM_MAX_STREAMS": 100_000,
    # a kept trace activity costs about 300 B (schedsim.trace.common.Activity and its table row): 3 GB at the cap
    "SCHEDSIM_MAX_TRACE_EVENTS": 10_000_000,
}


def work_limit(name: str) -> int:
    """The limit ``name`` (a key of :data:`WORK_LIMITS`): the environment's value if set, else the default.

    Raises
    ------
    SpecError
        If the environment holds something other than a positive integer.
    """
    from schedsim.errors import SpecError

    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return WORK_LIMITS[name]
    try:
        val = int(raw.replace("_", ""))
    except ValueError:
        val = 0
    if val <= 0:
        raise SpecError(f"{name}={raw!r} is not a positive integer",
                        fix=f"set {name} to a number of {name[13:].lower()}")
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
            # read the size the file has (+1 to see it grow), not the cap: read(n) reserves n bytes up front
            want = min(cap, os.fstat(f.fileno()).st_size) + 1
            data: bytes = f.read(want)
            if len(data) == want and want <= cap:  # it grew while read: the rest, up to the cap + 1
                data += f.read(cap + 1 - want)
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
    """Whether the lists/dicts of a parsed JSON document (plain ``dict`` and ``list``, as a JSON parser gives
    them) nest at most ``limit`` levels: a walk level by level, each level's items gathered by C-level chains and
    their types by one ``set(map(type, ...))``, so a column of a million numbers, or a list of a million flat
    mappings (an ops file's rows), costs a few C loops."""
    from itertools import chain

    level = [doc] if type(doc) is dict or type(doc) is list else []
    depth = 1
    while level:
        items = list(chain.from_iterable(n.values() if type(n) is dict else n for n in level))
        types = set(map(type, items))
        if dict not in types and list not in types:
            return True
        if depth >= limit:
            return False
        level = [c for c in items if type(c) is dict or type(c) is list]
        depth += 1
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

# --------------------------------------------------------------------------------------------------------------
# Writing JSON: one writer for every JSON file schedsim writes (timeline.json, compare.json, ...).

_orjson: Any
try:  # orjson: ~10x faster than json on the float columns, serialises numpy arrays without copies
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by tests that hide orjson
    _orjson = None


def _json_default(obj: Any) -> Any:
    """The stdlib fallback's handler: numpy arrays and scalars as lists and numbers (NaN and ±inf as null, as
    orjson writes them: the reader refuses the Infinity token in a column), a mapping that is not a dict (a
    pipeline's :class:`~schedsim.graph.info.ActionTexts`, a metrics' :class:`~schedsim.sim.metrics.RankColumns`) as
    its JSON read back (``json_bytes()``) or as a dict."""
    from collections.abc import Mapping

    if isinstance(obj, Mapping):
        raw = getattr(obj, "json_bytes", None)  # its JSON as orjson writes it (an orjson.Fragment there)
        return json.loads(raw()) if raw is not None else dict(obj)
    pieces = getattr(obj, "json_pieces", None)  # a critical path kept as rows (sim.path_ids.PathIds): its list
    if pieces is not None:
        return json.loads(b"".join(pieces()))
    if hasattr(obj, "tolist"):
        if getattr(obj, "dtype", None) is not None and obj.dtype.kind == "f":
            return _finite(obj.tolist())
        return obj.tolist()
    return str(obj)


def dumps_json(obj: Any, indent: bool = False) -> bytes:
    """Compact UTF-8 JSON of ``obj`` (``indent``: two spaces per level, for files people read): numpy arrays as
    lists, NaN/inf as null, non-string keys as strings, anything else unknown as ``str(obj)``. orjson when
    installed, else (and for what orjson refuses: an integer past 64 bits, which JSON allows and a tag value may
    be) the standard library."""
    if _orjson is not None:
        opts = _orjson.OPT_SERIALIZE_NUMPY | _orjson.OPT_NON_STR_KEYS | (_orjson.OPT_INDENT_2 if indent else 0)
        try:
            return _orjson.dumps(obj, default=_orjson_default, option=opts)
        except _orjson.JSONEncodeError:
            pass
    return json.dumps(_finite(obj), default=_json_default, **({"indent": 2} if indent else {"separators": (",", ":")})
                      ).encode("utf-8")


def _orjson_default(obj: Any) -> Any:
    """What orjson cannot write itself: a numpy array it does not take (non-contiguous, e.g. a strided column)
    as a contiguous copy, a mapping that is not a dict as its JSON (``json_bytes()``, a pipeline's
    :class:`~schedsim.graph.info.ActionTexts`, as an ``orjson.Fragment``: orjson 3.10 and later) or as a dict,
    an object with ``json_pieces`` (:class:`~schedsim.sim.path_ids.PathIds`) as their text, anything else as
    ``str(obj)``."""
    from collections.abc import Mapping

    import numpy as np

    if isinstance(obj, np.ndarray) and not obj.flags.c_contiguous:
        return np.ascontiguousarray(obj)
    if isinstance(obj, Mapping):
        raw = getattr(obj, "json_bytes", None)
        frag = getattr(_orjson, "Fragment", None)
        return frag(raw()) if raw is not None and frag is not None else dict(obj)
    pieces = getattr(obj, "json_pieces", None)  # a critical path kept as rows (sim.path_ids.PathIds): its list's
    if pieces is not None:  # text, or the list itself where this orjson has no Fragment
        frag = getattr(_orjson, "Fragment", None)
        return frag(b"".join(pieces())) if frag is not None else list(obj)
    return str(obj)


def _finite(obj: Any) -> Any:
    """NaN and ±inf floats as None (what orjson writes), in nested dicts and lists."""
    if isinstance(obj, float):
        return obj if float(obj) - float(obj) == 0.0 else None  # a numpy scalar's inf - inf would warn
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def loads_json(data: bytes) -> Any:
    """Parse JSON bytes; orjson when installed. Files that hold the NaN/Infinity tokens of Python's json
    (older row-layout timelines) fall back to the standard library.

    Raises
    ------
    ValueError
        Not JSON (``json.JSONDecodeError`` and orjson's error are both ValueErrors).
    """
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(data)
