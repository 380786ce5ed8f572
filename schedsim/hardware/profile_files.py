"""Reading profile files: :func:`profile_data` (a shipped name or a YAML path, its ``base:`` chain merged) and
:func:`list_profiles`; :func:`schedsim.hardware.profile.load_profile` validates the data into its models."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from schedsim.errors import ProfileError, printable
from schedsim.hardware.transports import over_base

__all__ = ["profile_data", "list_profiles", "MAX_BASE_DEPTH", "RETIRED_FIELDS", "retired_fields"]


#: Profile fields of the retired ``sharing`` model, which no model reads: ``(section, field) -> the field the
#: ``waves`` model reads for that effect``. A profile that still has one loads,
#: :func:`~schedsim.hardware.profile.load_profile` warning once per file; the models leave them out.
RETIRED_FIELDS = {
    ("contention", "compute_slowdown_with_comm"): "nccl.gemm_slowdown_beside_nccl",
    ("contention", "comm_slowdown_with_compute"): "nccl.slowdown_beside_gemm",
}


def retired_fields(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(section, field)`` of each :data:`RETIRED_FIELDS` entry that the profile mapping ``data`` sets.

    >>> retired_fields({"contention": {"compute_slowdown_with_comm": 0.1, "source": "x"}})
    [('contention', 'compute_slowdown_with_comm')]
    """
    return [(sec, f) for sec, f in RETIRED_FIELDS if isinstance(data.get(sec), Mapping) and f in data[sec]]


def _builtin_dir() -> Path:
    # the package's folder: what importlib.resources.files gave as a str, without importing importlib.resources
    # (and the zipfile, tempfile and shutil modules it imports: ~2% of a cold `predict`'s instructions)
    return Path(__file__).parent / "profiles"


def list_profiles() -> list[str]:
    """Names of the profiles shipped with schedsim."""
    return sorted(p.stem for p in _builtin_dir().glob("*.yaml"))


def _parse_yaml(text: str, where: str) -> Any:
    """The profile's YAML as plain dicts and lists, parsed under the guards of a schedule file
    (:func:`schedsim.spec.yaml_reader.parse_yaml`: libyaml when PyYAML has it, the alias-expansion and depth limits,
    recursive aliases refused).

    Raises
    ------
    ProfileError
        Invalid YAML, an alias bomb, nesting too deep; naming ``where``, the line and column.
    """
    from schedsim.errors import SpecError
    from schedsim.spec.yaml_reader import _strip, parse_yaml

    try:
        return _strip(parse_yaml(text, where))
    except SpecError as e:
        raise ProfileError(str(e)) from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``over``: mappings merge key by key, anything else (lists, numbers, text) replaces."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


#: How many ``base:`` links a profile may chain (a profile, its base, that one's base ...).
MAX_BASE_DEPTH = 8


def _on_base(p: Path, data: dict[str, Any], seen: tuple[Path, ...] = (),
             read: list[tuple] | None = None) -> dict[str, Any]:
    """A profile's fields over those of its ``base:``, itself resolved the same way: one profile that derives from
    another (dgx_h100 from h200: the same GH100 compute) states only what differs. ``base`` is a shipped
    profile's name, or a path to a profile YAML (relative to the deriving file's folder); a base may have its
    own base, up to :data:`MAX_BASE_DEPTH` links. ``seen``: the files of the chain so far.

    Raises
    ------
    ProfileError
        ``base`` is neither a shipped profile nor a file, the chain returns to a profile already in it (naming
        the cycle), or is longer than :data:`MAX_BASE_DEPTH`.
    """
    name = data.pop("base")
    chain = (*seen, p.resolve())
    src: Path | None = None
    if isinstance(name, str):
        src = _builtin_dir() / f"{name}.yaml" if not Path(name).suffix else p.parent / name
    if src is None or not src.exists():
        raise ProfileError(f"{p}: base: {name!r} is not a shipped profile or a profile file",
                           fix=f"name one of {', '.join(list_profiles())}, or a profile YAML's path")
    if src.resolve() in chain:
        loop = " -> ".join(str(x) for x in (*chain, src.resolve()))
        raise ProfileError(f"{p}: base: {name!r} makes a cycle of bases: {loop}",
                           fix="end the chain at a profile without base:")
    if len(chain) > MAX_BASE_DEPTH:
        raise ProfileError(f"{p}: base: {name!r}: more than {MAX_BASE_DEPTH} profiles chained by base:",
                           fix="derive from a profile nearer the end of the chain")
    (read if read is not None else []).append(_stamp(src))
    base = _parse_yaml(src.read_text(encoding="utf-8"), str(src))
    if not isinstance(base, dict):
        raise ProfileError(f"{src}: a profile must be a YAML mapping", fix="see schedsim/hardware/profiles/h200.yaml")
    _warn_retired(src, base)
    if "base" in base:
        base = _on_base(src, base, chain, read)
    return _merge(base, over_base(base, data))  # another transport: not the base's stated latency


def _warn_retired(p: Path, data: Mapping[str, Any]) -> None:
    """Warn (once per process) about the :data:`RETIRED_FIELDS` that the profile file ``p`` itself sets
    (``data``: its own mapping, before its ``base:`` is merged in, so that the warning names the file to edit)."""
    retired = retired_fields(data)
    if retired:
        from schedsim.outdir import _warn

        fields, now = ", ".join(f"{sec}.{f}" for sec, f in retired), ", ".join(RETIRED_FIELDS[x] for x in retired)
        _warn(f"{printable(p, 400)}: {fields}: deprecated and unused since the sharing model was retired (the waves "
              f"model reads {now}); delete {'them' if len(retired) > 1 else 'it'} from the profile")


def _stamp(p: Path) -> tuple:
    """What changes when file ``p`` is edited or replaced: the absolute path it is read by (links kept: what is
    stamped again), the file that path resolves to (a symbolic link pointed elsewhere changes it), its inode, size,
    modification and change times (``os.stat``; None where it cannot be read)."""
    at = os.path.abspath(p)
    try:
        st = p.stat()
    except OSError:
        return (at, None)
    return (at, str(p.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def profile_data(name_or_path: str, read: list[tuple]) -> tuple[Path, dict[str, Any]]:
    """The profile file of ``name_or_path`` (a shipped profile's name, or a YAML path) and its mapping, its ``base:``
    chain merged in (:func:`_on_base`), not yet validated (:func:`schedsim.hardware.profile.load_profile` does);
    the :func:`_stamp` of each file read appended to ``read``, taken before the read.

    Raises
    ------
    ProfileError
        Unknown name, unreadable file, invalid YAML, not a mapping, a bad ``base:``.
    """
    p = Path(name_or_path)
    if not p.suffix:
        p = _builtin_dir() / f"{name_or_path}.yaml"
        if not p.exists():
            import difflib

            names = list_profiles()
            close = difflib.get_close_matches(name_or_path, names, n=1)
            raise ProfileError(f"unknown profile {name_or_path!r}",
                               fix=(f"did you mean {close[0]!r}? " if close else "")
                               + f"shipped profiles: {', '.join(names)}; or pass a path to a profile YAML")
    from schedsim.io import read_text_input

    read.append(_stamp(p))
    data = _parse_yaml(read_text_input(p, "profile"), str(p))
    if not isinstance(data, dict):
        raise ProfileError(f"{p}: a profile must be a YAML mapping", fix="see schedsim/hardware/profiles/h200.yaml")
    _warn_retired(p, data)
    if "base" in data:
        data = _on_base(p, data, (), read)
    return p, data
