"""``schedsim calibrate --from-nccl-tests LOG...``: collective tables from nccl-tests logs. No torch.

The base profile (``--base``) supplies everything else; its
``collectives.tables`` gain one table per (collective, group size) found in the
logs, as ``[size_bytes, busbw_GBps]`` rows (out-of-place busbw, sizes whose
busbw prints as 0.00 dropped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["profile_from_nccl_tests", "write_profile", "base_profile_dict", "check_profile_name", "fit_tiers"]


def check_profile_name(name: str) -> str:
    """``name`` if it can name a profile: not empty, and no control, format or line-separator character.

    A profile's name is printed in tables, summaries and the profile's own header comment; a newline (or a
    Unicode line break, which YAML also reads as one, YAML 1.2 section 5.4) would break them.

    Raises
    ------
    SchedsimError
        ``--name: ...`` with a fix.
    """
    import unicodedata

    from schedsim.errors import SchedsimError

    bad = sorted({c for c in name if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")})
    if not name.strip() or bad:
        what = "is empty" if not name.strip() else "holds " + ", ".join(repr(c) for c in bad)
        raise SchedsimError(f"--name: the profile name {name!r} {what}",
                            fix="pass a name of printable characters, e.g. --name h200_nccl")
    return name


def default_profile_name(name: str | None, out: Path) -> str:
    """The profile's name: ``name`` (``--name``) checked by :func:`check_profile_name`, else the output file's
    stem with every character a name may not hold replaced by ``_`` (``profile`` if nothing is left).

    >>> default_profile_name(None, Path("h100\x1b[2J.yaml")), default_profile_name("mine", Path("x.yaml"))
    ('h100_[2J', 'mine')
    """
    import unicodedata

    if name is not None:
        return check_profile_name(name)
    stem = "".join("_" if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp") else c
                   for c in out.stem).strip()
    return stem or "profile"


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
    from schedsim.io import atomic_write_text, sealed

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
    check_profile_name(str(d.get("name", "")))
    text = yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=200, allow_unicode=True)
    # every line of the header a comment, whatever it holds (a line break in it must not end the comment)
    comment = "".join(f"# {x.removeprefix('#').lstrip()}\n" for x in header.splitlines()) if header.strip() else ""
    atomic_write_text(out, sealed(comment + text), kind="profile")  # a file there not a profile it wrote: refused


def fit_tiers(d: dict[str, Any], logs: list[Any], srcs: list[str], transport: bool = False,
              how: str = "--from-nccl-tests") -> None:
    """On a base profile with a cluster topology (``topology.scale_up``): fit each tier's per-(algorithm,
    protocol) figures to ``logs`` (:mod:`schedsim.network.fit`), write them into ``d``'s
    ``topology.scale_up.timing`` / ``topology.nics.timing`` (provenance ``fitted``) and print them. With
    ``transport`` (``--transport-latency``), ``topology.nics.transport_latency_us`` is fitted first and written,
    its ``source`` saying so (:func:`schedsim.network.fit.fit_transport_latency`).

    Logs the fit cannot use (send/recv-based collectives, groups that do not fit the profile's nodes, a base
    without ``topology.nics`` for logs across nodes) are named in ``note:`` lines on stderr, and so is a base
    without ``topology.scale_up`` (nothing fitted). ``how``: what measured the logs, in each figure's ``source``
    (``calibrate`` on several GPUs passes its own sweep, :func:`schedsim.network.fit.logs_from_sweep`).
    """
    import sys

    from schedsim.errors import printable
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.network.fit import fit_profile

    base = HardwareProfile.model_validate(d)
    if not logs:
        return
    if base.topology.scale_up is None:
        print("note: no tier figures fitted: the base profile has no topology.scale_up (NCCL's tuning model does "
              "not time its collectives); only the busbw tables are written. Pass --base with a cluster topology "
              "(e.g. dgx_h100) to fit them", file=sys.stderr)
        return
    fitted, figs, notes = fit_profile(base, logs, f"fitted by schedsim calibrate {how} to " + "; ".join(srcs),
                                      transport=transport)
    for note in notes:
        print(f"note: {printable(note)}", file=sys.stderr)
    if fitted.nccl.version != base.nccl.version:  # the logs' NCCL release (schedsim.network.fit)
        d.setdefault("nccl", {})["version"] = fitted.nccl.version
    nics, was = fitted.topology.nics, base.topology.nics
    if nics is not None and was is not None and nics.transport_latency_us != was.transport_latency_us:
        d["topology"]["nics"]["transport_latency_us"] = nics.transport_latency_us
        d["topology"]["nics"]["source"] = (f"{was.source}; transport_latency_us fitted by schedsim calibrate "
                                           f"--from-nccl-tests --transport-latency to {'; '.join(srcs)}")
    if not figs:
        return
    topo = fitted.topology.model_dump(mode="json")
    for tier in ("scale_up", "nics"):
        if topo.get(tier) is not None:
            d["topology"][tier]["timing"] = topo[tier]["timing"]
    print("fitted tier figures (NCCL chooses with its own constants; these time its choice):")
    print(f"  {'tier':9} {'algo/proto':18} {'hwLat (us)':>10} {'x NCCL bw':>10} {'rows':>5} {'rms err':>8}")
    for f in figs:
        bw = "-" if f.bw_factor is None else f"{f.bw_factor:.3f}"
        print(f"  {f.tier:9} {f.key:18} {f.hw_latency_us:>10.3f} {bw:>10} {f.rows:>5} {f.rms_pct:>7.1f}%")


def profile_from_nccl_tests(logs: list[Path], *, out: Path, name: str | None, base: str, collective: str | None,
                            nranks: int | None, transport: bool = False) -> dict[str, Any]:
    """Parse ``logs``, print each as an nccl-tests-style table, write the profile; returns the profile dict.
    ``transport``: fit ``topology.nics.transport_latency_us`` too (:func:`fit_tiers`).

    Raises
    ------
    SchedsimError
        A log cannot be read or parsed.
    """
    import sys

    from schedsim.errors import SchedsimError, printable
    from schedsim.network.nccl_tests import format_table, read_nccl_tests, skipped_warning

    d = base_profile_dict(base)
    d["name"] = default_profile_name(name, out)
    tables: dict[str, dict[int, list[list[float]]]] = {k: {int(n): [list(r) for r in rows] for n, rows in v.items()}
                                                       for k, v in d["collectives"]["tables"].items()}
    srcs = []
    seen: dict[tuple[str, int], str] = {}
    parsed = []
    for p in logs:
        file_logs = read_nccl_tests(p, collective=collective, nranks=nranks)
        parsed += file_logs
        warning = skipped_warning(file_logs)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        for log in file_logs:
            rows = [{"size": r.size_bytes, "count": r.count, "type": r.dtype, "redop": r.redop or "none",
                     "root": -1 if r.root is None else r.root, "time_us": r.oop_time_us, "algbw": r.oop_algbw_GBps,
                     "busbw": r.oop_busbw_GBps, "wrong": r.oop_wrong, "ip_busbw": r.ip_busbw_GBps} for r in log.rows]
            print(printable(format_table(rows, f"{log.collective} over {log.nranks} ranks, from {p}"), newlines=True))
            tab = [[float(s), float(b)] for s, b in log.table()]
            key = (str(log.collective), int(log.nranks or 0))
            where = f"{p}:{log.rows[0].line}"
            if not tab:
                raise SchedsimError(f"{where}: every busbw of this {key[0]} table is 0.00, so it gives no table",
                                    fix="pass a run that reaches sizes with a nonzero busbw (nccl-tests -e 1G)")
            if key in seen:
                raise SchedsimError(f"{where}: a second {key[0]} table over {key[1]} ranks (the first: {seen[key]})",
                                    fix="pass one log per collective and group size")
            seen[key] = where
            tables.setdefault(key[0], {})[key[1]] = tab
            nodes_of = d["collectives"].setdefault("nodes", {}).setdefault(key[0], {})
            k = log.nodes or 1
            if k > 1:  # a multi-node log's table times only groups over as many nodes
                nodes_of[key[1]] = k
            else:
                nodes_of.pop(key[1], None)
            on_nodes = f", {k} nodes" if k > 1 else ""
            srcs.append(f"{p.name} ({log.collective}, {log.nranks} ranks{on_nodes}, {len(tab)} sizes)")
    fit_tiers(d, parsed, srcs, transport)
    d["collectives"]["nodes"] = {k: v for k, v in d["collectives"].get("nodes", {}).items() if v}
    d["collectives"]["tables"] = tables
    d["collectives"]["source"] = ("nccl-tests logs (busbw: size x bus factor / the lesser of a row's two times): "
                                  + "; ".join(srcs))
    d["description"] = (d.get("description", "")
                        + f" Collective tables from nccl-tests logs: {', '.join(srcs)}.").strip()
    write_profile(d, out, f"# {d['name']}: profile {base!r} with collective tables from nccl-tests logs "
                  "(schedsim calibrate --from-nccl-tests)")
    print(f"wrote {printable(out)}")
    return d
