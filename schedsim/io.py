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
