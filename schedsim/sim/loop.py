"""What the event loops share: :data:`HOST`, a run's result per op (:class:`_State`), the deadlock report
(:func:`_raise_deadlock`) and the lookup of the compiled loop (:func:`compiled_loop`, :mod:`schedsim.sim._cwaves`,
required). :mod:`schedsim.sim.engine` runs the compiled ``waves`` loop through :mod:`schedsim.sim.waves_columns`,
and the ``replay`` loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from schedsim.errors import BuildError, DeadlockError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["HOST", "compiled_loop"]

#: ``binding`` value meaning "the op waited for its host launch".
HOST = -2


class _State(NamedTuple):
    """What a run leaves behind, per op (seconds; ``binding`` = op that released it, or HOST)."""

    start: Sequence[float]  # lists (Python loops) or array.array (compiled loop)
    end: Sequence[float]
    ready_t: Sequence[float]
    binding: Sequence[int]
    stream_t: Sequence[float] | np.ndarray | None = None  # waves: when the stream reached each op (deps done,
    # host at its call)
    host_s: np.ndarray | None = None  # waves: per rank, when its host returned from its last call (shape (world,))
    host_call: np.ndarray | None = None  # per op, when its host call returned (shape (N,))
    host_from: Sequence[int] | None = None  # replay: per op, the op whose end its host last waited for, else -1
    host_waits: list[tuple[int, float, float]] | None = None  # replay: (op, from_s, to_s) per host wait


def _raise_deadlock(ids, ops, end, npred, job_of, gmem, N) -> None:
    lines = []
    per_rank: dict[int, int] = {}
    for i, op in enumerate(ops):
        if end[i] < 0 and op.rank not in per_rank:
            per_rank[op.rank] = i
    for r, i in sorted(per_rank.items()):
        op = ops[i]
        if npred[i] > 0:
            why = f"waits on {npred[i]} unfinished predecessor(s)"
        else:
            j = job_of[i]
            members = gmem[j - N] if j >= N else []
            missing = [ids[m] for m in members if m != i]
            why = f"waits for its peers {', '.join(missing)} to arrive"
        lines.append(f"  rank {r}: {ids[i]} ({op.kind}) {why}")
    raise DeadlockError("the schedule deadlocks; stuck ops:\n" + "\n".join(lines),
                        fix="make every rank reach its collectives and send/recv in a compatible order",
                        ops=[ids[i] for _r, i in sorted(per_rank.items())])


_EXT: list[object] = []  # [module] once looked up
_LAYOUT = 20  # _cwaves.run's (and its helpers') argument lists and results' meaning: LAYOUT in _cwaves.c


def compiled_loop():
    """The compiled event loop :mod:`schedsim.sim._cwaves` (required: ``pip install`` builds it with a C
    compiler, or a wheel ships it).

    Raises
    ------
    BuildError
        When it is not built (no C compiler at install) or is out of date (its ``LAYOUT`` is not
        :data:`_LAYOUT`: built from an older ``_cwaves.c``); the message names the fix.
    """
    if not _EXT:
        try:
            from schedsim.sim import _cwaves as mod
        except ImportError as e:
            raise BuildError(f"schedsim's compiled event loop (schedsim.sim._cwaves) is not built: {e}",
                             fix="reinstall with a C compiler present (pip install -e . in a checkout, pip install "
                                 "schedsim elsewhere) or install a schedsim wheel") from None
        if getattr(mod, "LAYOUT", None) != _LAYOUT:  # built from an older _cwaves.c
            raise BuildError(f"schedsim's compiled event loop at {getattr(mod, '__file__', '?')} is out of date "
                             f"(LAYOUT {getattr(mod, 'LAYOUT', None)}, this source needs {_LAYOUT})",
                             fix="rebuild it: pip install -e . (or python setup.py build_ext --inplace) in a "
                                 "checkout, or reinstall schedsim")
        _EXT.append(mod)
    return _EXT[0]
