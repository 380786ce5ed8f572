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
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["STDOUT_NAMES", "atomic_write_bytes", "atomic_write_text", "atomic_writer", "output_set",
           "output_target", "refuse_input"]

#: Output paths that mean standard output.
STDOUT_NAMES = frozenset({"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"})


def output_target(path: str | Path, what: str = "output") -> Path | str:
    """Where an output named ``path`` goes: ``"stdout"``, ``"null"`` (``/dev/null``), or the regular file path
    to replace (a symbolic link's target, so the link stays).

    Raises
    ------
    SchedsimError
        ``path`` is a folder, FIFO, socket or device other than the two above (exit 2 on the command line).
    """
    from schedsim.errors import SchedsimError
    from schedsim.report.outdir import describe_mode

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


@contextmanager
def atomic_writer(path: str | Path, mode: str = "w") -> Iterator[Any]:
    """Open a temporary file beside ``path``; on success give it the umask's mode and rename it into place.

    A reader never sees a half-written file; on any exception (Ctrl-C included) the temporary file is
    removed and ``path`` keeps what it had. ``path`` goes through :func:`output_target`: ``-`` writes to
    standard output, ``/dev/null`` nowhere, and a special file is refused.

    Raises
    ------
    SchedsimError
        ``path`` is a folder, FIFO, socket or device.
    """
    target = output_target(path)
    if target == "stdout" or target == "null":
        if target == "null":
            f: Any = _Sink() if "b" in mode else io.TextIOWrapper(io.BufferedWriter(_Sink()), encoding="utf-8")
        else:
            f = sys.stdout.buffer if "b" in mode else sys.stdout
        yield f
        f.flush()
        return
    p = Path(target)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the mode a plain open() would
        if str(output_target(p)) != str(p):  # replaced by something else while we wrote: leave it alone
            raise OSError(f"{p} changed into a special file while schedsim wrote it; not replaced")
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
    from schedsim.report.outdir import describe_mode

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


@contextmanager
def output_set(outdir: str | Path, command: str, *, inputs: Iterable[str | Path] = (),
               expect: Iterable[str] = ()) -> Iterator[Path]:
    """Write ``command``'s set of output files into ``outdir``, all or nothing, replacing only its own
    earlier set.

    Yields a staging folder inside ``outdir``; when the block finishes, the folder's lock is taken
    (:func:`_commit_lock`, a bounded wait), the staged names are checked against what is there
    (:func:`schedsim.report.outdir.check_targets`: only ``command``'s own earlier, unchanged outputs are
    replaced; another command's file, a user's file, a special file or one of ``inputs`` there is refused),
    every file is moved in (``os.replace``, atomic per file) and the files of ``command``'s earlier set that
    this run did not write are removed when their content is what was recorded
    (:func:`schedsim.report.outdir.finish_set`). ``expect`` names files the command will surely write: they
    are checked before the block runs, so a refused folder costs no work. If the block raises, or the user
    presses Ctrl-C, the staging folder is removed and ``outdir`` keeps what it had. Staging folders of
    killed runs are removed (:func:`schedsim.report.outdir.clean_stale_staging`).

    Raises
    ------
    SchedsimError
        ``outdir`` is not a folder, a name to write is taken (see above), or the lock stayed held.
    OSError
        ``outdir`` cannot be created or written.
    """
    from schedsim.report import outdir as od

    inputs = list(inputs)
    out = output_dir(outdir)
    od.check_targets(out, command, expect, inputs=inputs)
    od.clean_stale_staging(out)
    stage = Path(tempfile.mkdtemp(prefix=od.staging_prefix(), dir=out))
    try:
        yield stage
        staged = sorted(stage.iterdir())
        written = {f.name: od.file_digest(f) for f in staged}
        with _commit_lock(out):  # two runs into one folder: one whole set after the other, never a mix
            m = od.Manifest.read(out)
            od.check_targets(out, command, written, m, inputs)
            m.moving(out, command, written)  # a run killed between moves leaves files the next one knows
            for f in staged:
                os.replace(f, out / f.name)
            od.finish_set(out, command, written, m)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
