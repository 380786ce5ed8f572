"""Output folders that keep their word.

* :func:`safe_dirname`: a schedule name made into one safe, *distinct* folder
  name. Names that are already safe stay as they are; any other name (non-ASCII
  ``訓練``, ``.``, ``..``, ``a/b``) becomes its ASCII slug plus 8 hex digits of
  the SHA-1 of the original name, so two names never share a folder by accident.
* :class:`Manifest`, :func:`check_targets`, :func:`finish_set`: each command
  (predict, sweep, analyze, import, compare, execute) keeps its own set of
  files in a folder, recorded with their SHA-256 in :data:`MANIFEST`. A command
  replaces a file only when it is its own earlier output, unchanged since
  (anything else there of a name it writes, another command's file or a user's,
  makes it refuse the folder with a fix), and after moving a set in it removes
  only the files of its own earlier set, again only when their content is what
  it recorded. A manifest names files; it never makes schedsim delete one.
* :func:`clean_stale_staging`: remove ``.schedsim-staging-*`` folders left by
  runs that were killed (their process is gone from this host, or the folder is
  older than :data:`STALE_AFTER_S`). Only folders holding schedsim's marker
  (:func:`mark_staging`) are ever removed, and a pid is judged only when the
  marker names this host, boot and pid namespace: folders of runs still going,
  here or on another machine sharing the folder, are kept.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from schedsim.io import (
    STAGING_PREFIX,
    WRITTEN_DIGESTS,
    _commit_lock,
    _staging_gone,
    describe_mode,
    file_identity,
    output_dir,
)

__all__ = ["MANIFEST", "STAGING_PREFIX", "STAGING_MARKER", "STALE_AFTER_S", "MAX_PNG_PX", "Manifest", "safe_dirname",
           "staging_prefix", "mark_staging", "staging_owner", "host_id",
           "clean_stale_staging", "check_targets", "describe_mode", "file_digest", "finish_set", "retire_set",
           "capped_figsize", "output_set", "TRACE_MAX_OPS", "trace_wanted"]

#: Hidden file recording, per command, the files schedsim wrote into a folder and their content hashes
#: (:class:`Manifest`).
MANIFEST = ".schedsim-outputs.json"
MANIFEST_FORMAT = "schedsim.outputs"
#: A manifest larger than this is not one schedsim wrote (a few hundred bytes per file listed).
MANIFEST_MAX_BYTES = 16 << 20
#: A staging folder older than this is removed even if its process id is alive (that pid was reused).
STALE_AFTER_S = 24 * 3600.0
#: The file inside each staging folder saying which run made it (:func:`mark_staging`).
STAGING_MARKER = STAGING_PREFIX + "owner.json"
STAGING_FORMAT = "schedsim.staging"
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def safe_dirname(name: str, limit: int = 100) -> str:
    """One folder name for ``name``: itself when already safe, else an ASCII slug plus a short hash.

    Examples
    --------
    >>> safe_dirname("allgather_mm8")
    'allgather_mm8'
    >>> safe_dirname("訓練") != safe_dirname("推論")
    True
    >>> safe_dirname("..").startswith("schedule-")
    True
    """
    if _SAFE.fullmatch(name) and len(name) <= limit:
        return name
    import hashlib  # here: check and the other commands that write nothing do not import it (~1% of a cold check)

    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-") or "schedule"
    return f"{slug[: limit - 9]}-{hashlib.sha1(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def staging_prefix() -> str:
    """Prefix of this process's staging folders: ``.schedsim-staging-<pid>-``."""
    return f"{STAGING_PREFIX}{os.getpid()}-"


def host_id() -> str:
    """This machine, boot and pid namespace: ``HOSTNAME|BOOT_ID|PID_NS`` (the boot id from
    ``/proc/sys/kernel/random/boot_id``, the namespace from ``/proc/self/ns/pid``; a part that cannot be read is
    empty). Two processes may compare pids only when their host ids are equal. The host name is
    ``os.uname().nodename``, what ``socket.gethostname()`` returns (both read the kernel's nodename), without
    importing :mod:`socket` (1% of a cold ``predict``); ``socket`` where there is no ``os.uname``."""

    def first(read: Callable[[], str]) -> str:
        try:
            return read().strip()
        except OSError:
            return ""

    boot = first(lambda: Path("/proc/sys/kernel/random/boot_id").read_text())
    ns = first(lambda: os.readlink("/proc/self/ns/pid"))
    if hasattr(os, "uname"):
        host = os.uname().nodename
    else:  # Windows
        import socket

        host = socket.gethostname()
    return f"{host}|{boot}|{ns}"


def mark_staging(stage: Path) -> None:
    """Write the marker of a staging folder this process just made: ``{"format": "schedsim.staging", "folder":
    NAME, "pid": PID, "host": host_id()}`` in :data:`STAGING_MARKER` (created exclusively).

    Raises
    ------
    OSError
        The marker cannot be created.
    """
    doc = {"format": STAGING_FORMAT, "folder": stage.name, "pid": os.getpid(), "host": host_id()}
    with open(stage / STAGING_MARKER, "x", encoding="utf-8") as f:
        json.dump(doc, f)


def staging_owner(stage: Path) -> tuple[int, str] | None:
    """``(pid, host_id)`` of the run that made ``stage``, from its marker; None when ``stage`` holds no marker
    schedsim wrote for it (then it is not schedsim's folder, and is never removed)."""
    p = stage / STAGING_MARKER
    try:
        if not stat.S_ISREG(p.lstat().st_mode) or p.lstat().st_size > 4096:
            return None
        doc = json.loads(p.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(doc, dict) and doc.get("format") == STAGING_FORMAT and doc.get("folder") == stage.name
            and type(doc.get("pid")) is int and isinstance(doc.get("host"), str)):
        return None
    return doc["pid"], doc["host"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale_staging(out: Path, now: float | None = None) -> list[Path]:
    """Remove the staging folders in ``out`` left by killed runs; returns those removed.

    Only a folder named ``.schedsim-staging-*`` holding the marker of the run that made it
    (:func:`staging_owner`) is considered; anything else of such a name is a user's and is left alone. It is
    stale when older than :data:`STALE_AFTER_S`, or when its marker names this host, boot and pid namespace
    (:func:`host_id`) and its pid is neither this process nor alive. A run of another host or container (a
    folder on NFS) is judged by age only.
    """
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(out.iterdir())
    except OSError:
        return removed
    here = None
    for d in entries:
        if not d.name.startswith(STAGING_PREFIX) or not d.is_dir() or d.is_symlink():
            continue
        owner = staging_owner(d)
        if owner is None:
            continue
        try:
            age = now - d.stat().st_mtime
        except OSError:
            continue
        pid, host = owner
        here = host_id() if here is None else here
        if age > STALE_AFTER_S or (host == here and pid != os.getpid() and not _alive(pid)):
            import shutil  # here: `check` does not import it (nor bz2 and lzma, which it imports)

            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


#: Digests this process read, by the file's identity and times (:func:`file_digest`); a few entries
_DIGESTS: dict[tuple[str, int, int, int, int, int], str] = {}
#: A file changed less than this long before its digest was read is read again every time: a write within the
#: same tick of the kernel's file clock (1-4 ms) can leave the times as they were ("racy git"'s rule)
_SETTLED_S = 2.0


def file_digest(path: Path) -> str:
    """SHA-256 (hex) of the file at ``path``, read in 1 MiB blocks.

    A file read once by this process is not read again while its device, inode, size, modification and change
    times (ns) are the same and it had last changed at least :data:`_SETTLED_S` before it was read: ``predict``
    checks an earlier timeline.json (100 MB at a million ops) before it runs and again before it replaces it.
    A write changes the change time, which no user call can set back. A file this process wrote with
    ``atomic_writer(..., digest=True)`` and that has the identity it had then is not read: its digest is that of
    the bytes written (:data:`schedsim.io.WRITTEN_DIGESTS`).

    Raises
    ------
    OSError
        ``path`` cannot be read.
    """
    st = os.stat(path)
    key = (os.fspath(path), *file_identity(st))
    got = _DIGESTS.get(key) or WRITTEN_DIGESTS.get(key[1:])
    if got is not None:
        return got
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
        digest = h.hexdigest()
        after = os.fstat(f.fileno())
    if ((after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns) == key[1:]
            and time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= _SETTLED_S * 1e9):
        if len(_DIGESTS) >= 16:
            _DIGESTS.clear()
        _DIGESTS[key] = digest
    return digest


_WARNED: set[str] = set()


def _warn(msg: str) -> None:
    """Print ``warning: msg`` on stderr, once per process."""
    if msg not in _WARNED:
        _WARNED.add(msg)
        print(f"warning: {msg}", file=sys.stderr)


def _plain_name(name: object) -> bool:
    """A file name a manifest may list: one path component, not hidden schedsim state."""
    return (isinstance(name, str) and name not in ("", ".", "..", MANIFEST) and "/" not in name and os.sep not in name
            and "\0" not in name and not name.startswith(STAGING_PREFIX))


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _identity_ok(rec: object) -> bool:
    """Whether ``rec`` is a manifest's identity record: ``[sha256, dev, ino, size, mtime_ns, ctime_ns]``, the
    five non-negative integers (:class:`Manifest`)."""
    return (isinstance(rec, list) and len(rec) == 6 and isinstance(rec[0], str) and bool(_SHA256.fullmatch(rec[0]))
            and all(type(x) is int and x >= 0 for x in rec[1:]))


def _hashes(h: object) -> list[str]:
    """A manifest record's hashes: one string, or a list of them (a set being moved in); [] when malformed."""
    hs = [h] if isinstance(h, str) else h if isinstance(h, list) and len(h) <= 2 else []
    return hs if all(isinstance(x, str) and _SHA256.fullmatch(x) for x in hs) else []


@dataclass
class Manifest:
    """What schedsim recorded writing into one output folder: per command, file name -> SHA-256 of the
    content it wrote (``.schedsim-outputs.json``: ``{"format": "schedsim.outputs", "version": 2, "sets":
    {command: {name: sha256}}, "identities": {command: {name: [sha256, dev, ino, size, mtime_ns, ctime_ns]}}}``;
    while a set is being moved in, a name's value is the list of its earlier and its new hash, so that a run
    killed between two moves leaves files the next run still knows as its own).

    ``identities`` (optional; older manifests have none) holds, per file moved in, the ``os.lstat`` identity it
    had right after the move (:func:`schedsim.io.file_identity`) beside the hash of its content then. A file
    whose identity is still the recorded one is the file schedsim moved in, unchanged: any write changes its
    modification and change times, and the change time cannot be set back by any user call (``os.utime`` sets
    the other two and moves the change time to now); a copy is another inode. So :meth:`holds` takes it for
    schedsim's without reading it (a re-run of a 1M-op ``predict`` hashed the earlier 100 MB timeline.json:
    0.09 CPU s); on any difference it hashes the file as before. A write keeping the size within the same tick
    of the file system's clock as the move leaves the identity as it was: that tick is 1-4 ms on ext4 or tmpfs,
    but 1 s on ext4 with 128-byte inodes, ext3 or sshfs and 2 s on FAT. So :meth:`read` keeps only records
    whose change time is before the manifest's own modification time (the "racy clean" rule of git's index,
    Documentation/technical/racy-git.txt): a tick that ended before the manifest was written holds no write
    made after it; a record of the manifest's own tick is dropped and its file hashed. A write between the
    move and the manifest's write races schedsim's own replace of the file under the folder's lock anyway.

    A record proves nothing by itself (anyone can write this file): a file is taken for schedsim's only when
    its content still hashes to what the record says, or it has the identity recorded with that hash
    (:meth:`holds`). A stale manifest (a file replaced or edited since) can make schedsim keep a file, never
    remove or replace one the user wrote. A forged one can name a user's file by its SHA-256, which takes
    reading the file; an identity takes only ``lstat``, which needs no read permission, so :meth:`read` takes
    identities only from a manifest owned by the user running schedsim (one another user planted in a shared
    folder, naming a file they cannot read, has its files hashed).
    """

    sets: dict[str, dict[str, str | list[str]]] = field(default_factory=dict)
    identities: dict[str, dict[str, list[str | int]]] = field(default_factory=dict)

    @classmethod
    def read(cls, out: Path) -> Manifest:
        """The manifest of ``out``; an empty one when there is none. One that is not a version-2 schedsim
        manifest (an older schedsim's list of names, anything else) is ignored with a warning on stderr."""
        p = out / MANIFEST
        try:
            if not stat.S_ISREG((st := p.lstat()).st_mode):
                _warn(f"ignoring {p}: not a regular file; no file is removed or replaced because of it")
                return cls()
            if st.st_size > MANIFEST_MAX_BYTES:
                raise ValueError(f"over {MANIFEST_MAX_BYTES:,} bytes")
            doc = json.loads(p.read_bytes())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError, RecursionError) as e:
            _warn(f"ignoring {p}: not a manifest schedsim wrote ({type(e).__name__}); no file is removed or "
                  "replaced because of it")
            return cls()
        sets = doc.get("sets") if isinstance(doc, dict) and doc.get("format") == MANIFEST_FORMAT else None
        if not isinstance(sets, dict):
            _warn(f"ignoring {p}: not a manifest this schedsim wrote (no \"format\": \"{MANIFEST_FORMAT}\" with "
                  "sets of content hashes); no file is removed or replaced because of it")
            return cls()
        kept = {str(cmd): {n: h for n, h in files.items() if _plain_name(n) and _hashes(h)}
                for cmd, files in sets.items() if isinstance(files, dict)}
        ids = doc.get("identities")
        written = st.st_mtime_ns  # a record whose change time is not before this may share its clock tick
        euid = getattr(os, "geteuid", None)
        if euid is not None and st.st_uid != euid():  # another user's manifest: its identities are not taken
            ids = None
        return cls(kept, {cmd: {n: rec for n, rec in files.items()
                                if n in kept[cmd] and _identity_ok(rec) and rec[5] < written}
                          for cmd, files in ids.items() if cmd in kept and isinstance(files, dict)}
                   if isinstance(ids, dict) else {})

    def owner(self, name: str) -> str | None:
        """The command whose set lists ``name`` (the first, if a hand-edited manifest lists it twice)."""
        return next((cmd for cmd, files in self.sets.items() if name in files), None)

    def holds(self, out: Path, command: str, name: str) -> bool:
        """Whether ``out/name`` is a regular file whose content is what ``command`` recorded writing."""
        want = self.sets.get(command, {}).get(name)
        p = out / name
        try:
            if want is None or not stat.S_ISREG((st := p.lstat()).st_mode):
                return False
            hashes = _hashes(want)
            rec = self.identities.get(command, {}).get(name)
            if rec is not None and rec[0] in hashes and tuple(rec[1:]) == file_identity(st):
                return True  # the file moved in, unchanged since (class docstring): not read
            return file_digest(p) in hashes
        except OSError:
            return False

    def moving(self, out: Path, command: str, written: Mapping[str, str]) -> None:
        """Record, before the moves, that ``command``'s files ``written`` (name -> new hash) may hold either
        their earlier or their new content (written to ``out`` at once)."""
        files = self.sets.setdefault(command, {})
        for name, h in written.items():
            files[name] = sorted({*_hashes(files.get(name, [])), h})
        self.write(out)

    def write(self, out: Path) -> None:
        """Write atomically to ``out/.schedsim-outputs.json``."""
        from schedsim.io import atomic_write_text

        doc: dict[str, object] = {"format": MANIFEST_FORMAT, "version": 2,
                                  "sets": {c: dict(sorted(f.items())) for c, f in sorted(self.sets.items()) if f}}
        ids = {c: dict(sorted(f.items())) for c, f in sorted(self.identities.items()) if f}
        if ids:
            doc["identities"] = ids
        atomic_write_text(out / MANIFEST, json.dumps(doc, indent=1), follow_links=False)  # never a link's target


def check_targets(out: Path, command: str, names: Iterable[str], manifest: Manifest | None = None,
                  inputs: Iterable[str | Path] = ()) -> None:
    """Refuse, before anything is moved, to write ``names`` into ``out`` over anything but ``command``'s own
    earlier outputs.

    A name may be written when nothing is there, or when the file there is one ``command`` wrote earlier and
    nobody changed since (:meth:`Manifest.holds`). Anything else is another command's output (``analyze
    --charts`` into a ``predict`` folder), a user's file, a file a user edited, a folder, link or device, or one
    of the files this command reads. A :data:`MANIFEST` that is not a regular file (a link to a user's file)
    refuses the whole folder: writing the manifest would replace it.

    Raises
    ------
    SchedsimError
        Naming the first such file, with a fix (exit 2 on the command line).
    """
    from schedsim.errors import SchedsimError

    try:
        mmode = (out / MANIFEST).lstat().st_mode
    except OSError:
        mmode = stat.S_IFREG
    if not stat.S_ISREG(mmode):
        raise SchedsimError(f"{command}: {out / MANIFEST}: is {describe_mode(mmode)}, not the file of its outputs "
                            "schedsim keeps there; the folder is not written", fix="move it away, or write to "
                            "another folder" + (" with --out" if command != "analyze" else ""))
    m = Manifest.read(out) if manifest is None else manifest
    ins = [Path(i) for i in inputs]
    for name in names:
        p = out / name
        try:
            st = p.lstat()
        except FileNotFoundError:
            continue
        where = f"{command}: {p}"
        elsewhere = "write to another folder" + (" with --out" if command != "analyze" else "")
        if not stat.S_ISREG(st.st_mode):
            raise SchedsimError(f"{where}: is {describe_mode(st.st_mode)}, not a file {command} wrote; not replaced",
                                fix=f"move it away, or {elsewhere}")
        for i in ins:
            try:
                same = os.path.samefile(i, p)
            except OSError:
                same = False
            if same:
                raise SchedsimError(f"{where}: is the input {command} reads ({i}); not replaced", fix=elsewhere)
        if m.holds(out, command, name):
            continue
        other = m.owner(name)
        if other is not None and other != command and m.holds(out, other, name):
            raise SchedsimError(f"{where}: holds `{other}`'s output of that name; {command} does not replace "
                                "another command's files", fix=f"{elsewhere} (e.g. {out / command})")
        raise SchedsimError(f"{where}: exists and schedsim did not record writing it (or it changed since); not "
                            "replaced", fix=f"move or rename it, or {elsewhere}")


def finish_set(out: Path, command: str, written: Mapping[str, str], manifest: Manifest | None = None,
               identities: Mapping[str, tuple[int, int, int, int, int]] | None = None, add: bool = False) -> list[str]:
    """Record ``written`` (name -> SHA-256) as ``command``'s set in ``out``'s manifest and remove the files of
    ``command``'s earlier set that this run did not write (a predict of a non-pipeline schedule into a folder
    that held a pipeline's ``pipeline.png``). Returns the names removed. ``identities``: name -> the
    :func:`schedsim.io.file_identity` of the file just moved in with that content (:class:`Manifest`); the
    set's other names get no identity record.

    Only a file whose content still hashes to what ``command`` recorded is removed: another command's files,
    a user's files, files a user changed and anything a planted or foreign manifest names are kept (with a
    warning when a record no longer matches). Call it holding the folder's lock, after the moves.

    ``add``: ``written`` joins ``command``'s set and nothing is removed (files written one at a time by separate
    processes, as ``execute``'s ``failure_rank<r>.json`` of each rank: :func:`output_set` with ``add``).
    """
    m = Manifest.read(out) if manifest is None else manifest
    removed: list[str] = []
    earlier = {} if add else m.sets.get(command, {})  # with add, the set's other files stay, listed
    for name in sorted(set(earlier) - set(written)):
        p = out / name
        if m.holds(out, command, name):
            try:
                p.unlink()
                removed.append(name)
            except OSError:
                pass
        elif os.path.lexists(p):
            _warn(f"kept {p}: {command} wrote a file of that name earlier, but this one is not what it wrote")
    new_ids: dict[str, list[str | int]] = {n: [written[n], *ident] for n, ident in (identities or {}).items()
                                           if n in written}
    if add:
        m.sets[command] = {**m.sets.get(command, {}), **written}
        m.identities[command] = {**{n: r for n, r in m.identities.get(command, {}).items() if n not in written},
                                 **new_ids}
    else:
        m.sets[command] = {n: h for n, h in written.items()}
        m.identities[command] = new_ids
    for cmd in list(m.sets):  # forget records of files that are gone
        m.sets[cmd] = {n: h for n, h in m.sets[cmd].items() if os.path.lexists(out / n)}
        m.identities[cmd] = {n: r for n, r in m.identities.get(cmd, {}).items() if n in m.sets[cmd]}
    m.write(out)
    return removed


def retire_set(out: Path, command: str) -> list[str]:
    """Remove ``command``'s earlier set from ``out`` (``execute --compare`` whose run needs no
    ``predicted_timed/`` any more), under the folder's lock, by :func:`finish_set` of nothing: only files
    whose content is what was recorded go. The folder itself goes too when nothing else is left in it.
    Returns the names removed."""
    with _commit_lock(out):
        if not (out / MANIFEST).is_file():
            return []
        removed = finish_set(out, command, {})
        if not any(Manifest.read(out).sets.values()) and [p.name for p in out.iterdir()] == [MANIFEST]:
            (out / MANIFEST).unlink()
            out.rmdir()
    return removed


#: Above this many ops ``predict`` skips trace.json unless ``--trace`` asks for it: the Chrome JSON of a
#: 100k-op run is ~20 MB, about what ui.perfetto.dev opens without stalling, and writing it cost as
#: much as the simulation (6.7 s of 38 CPU-s at 1M ops, 2-core machine).
TRACE_MAX_OPS = 100_000


def trace_wanted(n_ops: int, trace: bool | None, name: str = "trace.json",
                 instead: str = "timeline.json has every op", flag: str = "--trace") -> tuple[bool, str | None]:
    """Whether to write trace.json (``name``) for ``n_ops`` ops: ``trace`` True/False is the user's choice
    (``--trace`` / ``--no-trace``: ``flag``); None means automatic (only up to :data:`TRACE_MAX_OPS`). Returns (write,
    note), the note being the one line to print when a large run's trace is skipped (``instead``: where the
    ops are). ``predict``'s gantt.svg follows the same rule (``flag`` ``--svg``): past :data:`TRACE_MAX_OPS` ops
    (ten times ``chart_base.RASTER_MIN_BOXES``) the Gantt paints its boxes under 4 px, its waits and exposed bands
    into one raster image, which the SVG embeds as it is, so the SVG holds gantt.png's picture with the text as
    vector paths (its cost measured in docs/validation.md, "pp=32: gantt.svg on request past 100,000 ops").

    >>> trace_wanted(10, None), trace_wanted(10**6, True)
    ((True, None), (True, None))
    """
    if trace is not None:
        return trace, None
    if n_ops <= TRACE_MAX_OPS:
        return True, None
    return False, f"note: {name} skipped ({n_ops:,} ops > {TRACE_MAX_OPS:,}); pass {flag} to write it ({instead})"


#: Largest width or height of a PNG schedsim draws (pixels); a 200-point sweep asked for 13,530 px.
MAX_PNG_PX = 8000


def capped_figsize(width_in: float, height_in: float, dpi: float) -> tuple[float, float]:
    """A matplotlib figure size (inches) no wider or taller than :data:`MAX_PNG_PX` pixels at ``dpi``.

    Examples
    --------
    >>> capped_figsize(123.0, 4.0, 110)
    (72.72727272727273, 4.0)
    """
    cap = MAX_PNG_PX / dpi
    return min(width_in, cap), min(height_in, cap)


@contextmanager
def output_set(outdir: str | Path, command: str, *, inputs: Iterable[str | Path] = (),
               expect: Iterable[str] = (), add: bool = False) -> Iterator[Path]:
    """Write ``command``'s set of output files into ``outdir``, all or nothing, replacing only its own
    earlier set.

    Yields a staging folder inside ``outdir``; when the block finishes, the folder's lock is taken
    (:func:`_commit_lock`, a bounded wait), the staged names are checked against what is there
    (:func:`check_targets`: only ``command``'s own earlier, unchanged outputs are
    replaced; another command's file, a user's file, a special file or one of ``inputs`` there is refused),
    every file is moved in (``os.replace``, atomic per file) and the files of ``command``'s earlier set that
    this run did not write are removed when their content is what was recorded
    (:func:`finish_set`). ``expect`` names files the command will surely write: they
    are checked before the block runs, so a refused folder costs no work. If the block raises, or the user
    presses Ctrl-C, the staging folder is removed and ``outdir`` keeps what it had. Staging folders of
    killed runs are removed (:func:`clean_stale_staging`). ``add``: the staged files join ``command``'s set, whose
    earlier files are all kept (:func:`finish_set`): for files that processes write one by one into one folder
    (each rank of ``execute``).

    Raises
    ------
    SchedsimError
        ``outdir`` is not a folder, a name to write is taken (see above), or the lock stayed held.
    OSError
        ``outdir`` cannot be created or written.
    """
    inputs = list(inputs)
    out = output_dir(outdir)
    check_targets(out, command, expect, inputs=inputs)
    clean_stale_staging(out)
    import tempfile  # here, as hashlib: commands that write nothing do not import it

    stage = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=out))
    try:
        mark_staging(stage)
        yield stage
        if staging_owner(stage) is None:
            raise _staging_gone(stage)
        staged = sorted(f for f in stage.iterdir() if f.name != STAGING_MARKER)
        written = {f.name: file_digest(f) for f in staged}
        with _commit_lock(out):  # two runs into one folder: one whole set after the other, never a mix
            m = Manifest.read(out)
            check_targets(out, command, written, m, inputs)
            m.moving(out, command, written)  # a run killed between moves leaves files the next one knows
            moved = {}
            for f in staged:
                before = file_identity(f.lstat())
                os.replace(f, out / f.name)
                after = file_identity((out / f.name).lstat())
                if after[:4] == before[:4]:  # the file staged, moved (the move set its change time): identified
                    moved[f.name] = after
            finish_set(out, command, written, m, moved, add=add)
    finally:
        import shutil

        shutil.rmtree(stage, ignore_errors=True)
