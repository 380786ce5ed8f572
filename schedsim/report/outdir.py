"""Output folders that keep their word.

* :func:`safe_dirname`: a schedule name made into one safe, *distinct* folder
  name. Names that are already safe stay as they are; any other name (non-ASCII
  ``訓練``, ``.``, ``..``, ``a/b``) becomes its ASCII slug plus 8 hex digits of
  the SHA-1 of the original name, so two names never share a folder by accident.
* :func:`finish_set`: after a set of outputs is moved into a folder, remove the
  files an earlier run wrote there that this run did not (a predict of a
  non-pipeline schedule into a folder that held a pipeline's ``pipeline.png``
  and ``memory.png``). Only files schedsim wrote are removed: the ones listed
  in the folder's manifest :data:`MANIFEST`, and the ``replaces`` names the
  command passes (its own output names, for folders written before manifests).
* :func:`clean_stale_staging`: remove ``.schedsim-staging-*`` folders left by
  runs that were killed (their process is gone, or the folder is older than
  :data:`STALE_AFTER_S`). Folders of runs still going are kept, so concurrent
  runs into one folder stay safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["MANIFEST", "STAGING_PREFIX", "STALE_AFTER_S", "MAX_PNG_PX", "safe_dirname", "staging_prefix",
           "clean_stale_staging", "finish_set", "capped_figsize", "written_by_schedsim"]

#: Hidden file listing the outputs of the last run written into a folder (JSON list of file names).
MANIFEST = ".schedsim-outputs.json"
STAGING_PREFIX = ".schedsim-staging-"
#: A staging folder older than this is removed even if its process id is alive (that pid was reused).
STALE_AFTER_S = 24 * 3600.0
#: A staging folder without a process id in its name (older schedsim) is removed after this long.
STALE_UNKNOWN_S = 3600.0
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
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-") or "schedule"
    return f"{slug[: limit - 9]}-{hashlib.sha1(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def staging_prefix() -> str:
    """Prefix of this process's staging folders: ``.schedsim-staging-<pid>-``."""
    return f"{STAGING_PREFIX}{os.getpid()}-"


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

    A folder named ``.schedsim-staging-<pid>-*`` is stale when no process ``pid`` runs on this host or it
    is older than :data:`STALE_AFTER_S`; one without a pid, when older than :data:`STALE_UNKNOWN_S`.
    """
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(out.iterdir())
    except OSError:
        return removed
    for d in entries:
        if not d.name.startswith(STAGING_PREFIX) or not d.is_dir() or d.is_symlink():
            continue
        try:
            age = now - d.stat().st_mtime
        except OSError:
            continue
        m = re.match(r"(\d+)-", d.name[len(STAGING_PREFIX):])
        if m:
            pid = int(m.group(1))
            stale = age > STALE_AFTER_S or (pid != os.getpid() and not _alive(pid))
        else:
            stale = age > STALE_UNKNOWN_S
        if stale:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def written_by_schedsim(out: Path) -> bool:
    """Whether ``out`` already holds a schedsim output set: a manifest, or (folders written before manifests)
    a ``timeline.json`` whose head says ``"format": "schedsim.timeline"``.

    Only then may a command remove the ``replaces`` names it finds there: in any other folder a
    ``memory.png`` or ``gantt.png`` is the user's own file (issue 12 review: ``--out .`` in a project folder
    deleted the user's ``memory.png``).
    """
    if (out / MANIFEST).is_file():
        return True
    try:
        with open(out / "timeline.json", "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return re.search(rb'"format"\s*:\s*"schedsim\.timeline"', head) is not None


def finish_set(out: Path, written: Iterable[str], replaces: Iterable[str] = ()) -> None:
    """Record ``written`` in ``out``'s manifest and remove earlier outputs this run did not write.

    Parameters
    ----------
    out : Path
        The output folder.
    written : iterable of str
        File names this run moved into ``out``.
    replaces : iterable of str
        File names the command may write; any left from an earlier run are removed too (for folders
        that have no manifest yet). Pass them only when :func:`written_by_schedsim` held before this run
        moved its files in.
    """
    from schedsim.sim.timeline import atomic_write_text

    new = sorted(set(written))
    old: set[str] = set(replaces)
    try:
        listed = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        if isinstance(listed, list):
            old |= {x for x in listed if isinstance(x, str)}
    except (OSError, ValueError):
        pass
    for name in old - set(new):
        if "/" in name or os.sep in name or name in (".", "..", MANIFEST) or name.startswith(STAGING_PREFIX):
            continue  # a manifest is data: never follow it out of the folder
        p = out / name
        try:
            if p.is_file() or p.is_symlink():
                p.unlink()
        except OSError:
            pass
    atomic_write_text(out / MANIFEST, json.dumps(new))


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
