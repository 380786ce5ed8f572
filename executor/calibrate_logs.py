"""``schedsim calibrate --from-nccl-tests LOG...``: collective tables from nccl-tests logs. No torch.

The base profile (``--base``) supplies everything else; its
``collectives.tables`` gain one table per (collective, group size) found in the
logs, as ``[size_bytes, busbw_GBps]`` rows (out-of-place busbw, sizes whose
busbw prints as 0.00 dropped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["profile_from_nccl_tests", "write_profile", "base_profile_dict"]


def base_profile_dict(base: str) -> dict[str, Any]:
    """The base profile as a plain dict (validated through :func:`schedsim.hardware.profile.load_profile`)."""
    from schedsim.hardware.profile import load_profile

    return load_profile(base).model_dump(mode="json")


def write_profile(d: dict[str, Any], out: Path, header: str = "") -> None:
    """Validate ``d`` as a :class:`HardwareProfile` and write it as YAML atomically.

    Raises
    ------
    ProfileError
        If the dict does not validate (a bug in the caller).
    """
    import yaml
    from pydantic import ValidationError

    from schedsim.errors import ProfileError
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.io import atomic_write_text

    try:
        HardwareProfile.model_validate(d)
    except ValidationError as e:
        raise ProfileError(f"calibrated profile does not validate: {e}") from None

    class _Dumper(yaml.SafeDumper):
        pass

    def _tuple(dumper: Any, data: tuple[Any, ...]) -> Any:
        return dumper.represent_sequence("tag:yaml.org,2002:seq", list(data), flow_style=True)

    def _list(dumper: Any, data: list[Any]) -> Any:
        flow = all(not isinstance(x, (list, tuple, dict)) for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    _Dumper.add_representer(tuple, _tuple)
    _Dumper.add_representer(list, _list)
    text = yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=200, allow_unicode=True)
    atomic_write_text(out, (header.rstrip() + "\n" if header else "") + text)


def profile_from_nccl_tests(logs: list[Path], *, out: Path, name: str | None, base: str, collective: str | None,
                            nranks: int | None) -> dict[str, Any]:
    """Parse ``logs``, print each as an nccl-tests-style table, write the profile; returns the profile dict.

    Raises
    ------
    SchedsimError
        A log cannot be read or parsed.
    """
    from schedsim.errors import printable
    from schedsim.nccl_tests import format_table, read_nccl_tests

    d = base_profile_dict(base)
    d["name"] = name or out.stem
    tables: dict[str, dict[int, list[list[float]]]] = {k: {int(n): [list(r) for r in rows] for n, rows in v.items()}
                                                       for k, v in d["collectives"]["tables"].items()}
    srcs = []
    for p in logs:
        for log in read_nccl_tests(p, collective=collective, nranks=nranks):
            rows = [{"size": r.size_bytes, "count": r.count, "type": r.dtype, "redop": r.redop or "none",
                     "root": -1 if r.root is None else r.root, "time_us": r.oop_time_us, "algbw": r.oop_algbw_GBps,
                     "busbw": r.oop_busbw_GBps, "wrong": r.oop_wrong} for r in log.rows]
            print(printable(format_table(rows, f"{log.collective} over {log.nranks} ranks, from {p}"), newlines=True))
            tab = [[float(s), float(b)] for s, b in log.table()]
            if not tab:
                continue
            tables.setdefault(str(log.collective), {})[int(log.nranks)] = tab  # type: ignore[arg-type]
            srcs.append(f"{p.name} ({log.collective}, {log.nranks} ranks, {len(tab)} sizes)")
    d["collectives"]["tables"] = tables
    d["collectives"]["source"] = "nccl-tests logs (out-of-place busbw): " + "; ".join(srcs)
    d["description"] = (d.get("description", "")
                        + f" Collective tables from nccl-tests logs: {', '.join(srcs)}.").strip()
    write_profile(d, out, f"# {d['name']}: profile {base!r} with collective tables from nccl-tests logs "
                  "(schedsim calibrate --from-nccl-tests)")
    print(f"wrote {printable(out)}")
    return d
