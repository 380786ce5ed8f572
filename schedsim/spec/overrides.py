"""``--set key=value`` overrides: :func:`parse_overrides` turns the command line's pairs into parameter
values, each value read as YAML (:func:`parse_value`) under the same guards as a schedule file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from schedsim.errors import SpecError, printable
from schedsim.expr import _short
from schedsim.spec.limits import MAX_YAML_DEPTH
from schedsim.spec.yaml_reader import LDict, LList, _check_expansion, _construct, _strip

__all__ = ["parse_overrides", "parse_value"]


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Parse ``--set key=value`` strings; values are read as YAML scalars.

    Raises
    ------
    SpecError
        If an item has no ``=``.

    Examples
    --------
    >>> parse_overrides(["chunks=4", "dtype=fp16"])
    {'chunks': 4, 'dtype': 'fp16'}
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SpecError(f"--set {_short(item)} is not key=value", fix="write e.g. --set chunks=4")
        k, v = item.split("=", 1)
        k = k.strip()
        out[k] = parse_value(v, f"--set {printable(k, 80)}") if v.strip() else ""
    return out


def parse_value(text: str, where: str) -> Any:
    """One value written on the command line (``--set k=VALUE``), read as YAML under the guards of a schedule
    file (:func:`_check_expansion`'s alias limit, the depth limit, recursive aliases refused): a scalar, or a
    list/mapping. Text that is not YAML (``a: b: c``) stays the string as written.

    Raises
    ------
    SpecError
        Naming ``where``: an alias bomb, nesting past the depth limit, or a recursive alias.
    """
    bad = next((c for c in text if "\ud800" <= c <= "\udfff"), None)
    if bad is not None:  # bytes of the command line that are not UTF-8 (Python keeps them as lone surrogates)
        raise SpecError(f"the value holds bytes that are not UTF-8 text ({bad.encode('utf-8', 'surrogateescape')!r})",
                        file=where, fix="write the value in UTF-8 (check the terminal's encoding)")
    deep = SpecError(f"the value nests lists/mappings more than {MAX_YAML_DEPTH} levels deep", file=where,
                     fix="write a flat value, e.g. --set chunks=4 or --set sizes=[1,2,4]")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        node = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as e:
        if "nesting depth" in str(e):  # libyaml's own limit (1000 levels)
            raise deep from None
        return text
    except RecursionError:
        raise deep from None
    if node is None:
        return None
    _check_expansion(node, where, text)
    value = _construct(node, where)
    return _strip(value) if isinstance(value, (LDict, LList)) else value
