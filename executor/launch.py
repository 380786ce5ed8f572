"""``schedsim execute --nproc-per-node N FILE``: validate in this process, then start the ranks through torch's
own launcher (``torch.distributed.run``, what ``torchrun`` runs) on this node.

Why not only ``torchrun -m schedsim execute``: there a bad schedule is found in every rank, after torchrun
started them, and torchrun turns the ranks' clean exit 2 into its own exit 1 and a ``ChildFailedError``
traceback. Here the parent checks everything the ranks would check before any process group exists
(:func:`executor.execute._precheck`: the schedule, its graph, the world size against ``N``, ``--cuda-graph``,
the ``--compare`` profile, the output folder; and the backend and device against this machine), so bad input
gets one ``error:`` line, a ``fix:`` line and exit 2 with no rank started. When ranks fail later (a timeout, a
device error), their own ``error: rank R: ...`` lines are printed as they happen, and the parent adds one
summary line and exits with their exit code (2 for the executor's failures, 130 for Ctrl-C), never a
traceback.

The ranks run ``python -m schedsim execute`` with the parameters the user gave (:func:`rank_argv`), so
everything ``torchrun -m schedsim execute`` does, they do.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from executor import ExecError

__all__ = ["launch_ranks", "rank_argv"]


def rank_argv(ctx: Any, drop: tuple[str, ...] = ("nproc_per_node",)) -> list[str]:
    """The arguments that give each rank the parameters the user set on this click command (``ctx``), less
    ``drop``: options first (flags as given, ``--x/--no-x`` by their value, repeated options repeated), then
    the positional arguments after ``--``.

    Parameters left at their defaults are not passed, so a rank takes the same defaults.
    """
    opts: list[str] = []
    args: list[str] = []
    for p in ctx.command.params:  # click's (typer's) parameters, told apart by their param_type_name
        if p.name in drop or p.name is None:
            continue
        if getattr(ctx.get_parameter_source(p.name), "name", "DEFAULT") == "DEFAULT":
            continue
        v = ctx.params[p.name]
        if p.param_type_name == "argument":
            args += [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]
        elif p.param_type_name == "option":
            if p.is_flag and p.secondary_opts:
                opts.append(p.opts[0] if v else p.secondary_opts[0])
            elif p.is_flag:
                if v:
                    opts.append(p.opts[0])
            elif p.multiple:
                for x in v or ():
                    opts += [p.opts[0], _plain(x)]
            elif v is not None:
                opts += [p.opts[0], _plain(v)]
    return [*opts, "--", *args]


def _plain(v: Any) -> str:
    """An option value as its command-line text (an enum by its value)."""
    return str(getattr(v, "value", v))


def _under_launcher() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def launch_ranks(nproc: int, argv: list[str], *, file: Path, backend: str, device: str,
                 check: Any) -> None:
    """Validate, then run ``python -m schedsim execute ARGV`` in ``nproc`` local ranks (standalone rendezvous).

    ``check(world)`` runs the executor's own input checks for ``world`` ranks (raising the error).

    Raises
    ------
    SchedsimError
        Bad input (before any rank starts), or ``--nproc-per-node`` given inside a torchrun launch.
    typer.Exit
        The ranks failed: their exit code (2, or 130 when interrupted; 1 when a rank died otherwise).
    """
    import typer

    if _under_launcher():
        raise ExecError("--nproc-per-node is for starting the ranks; this process is already a rank of a torchrun "
                        "launch", fix="drop --nproc-per-node (torchrun -m schedsim execute FILE), or run schedsim "
                        "execute --nproc-per-node N FILE without torchrun")
    check(nproc)
    import torch

    from executor.dist import resolve_backend

    _b, cuda = resolve_backend(backend, device, torch.cuda.is_available())
    if cuda and nproc > torch.cuda.device_count():
        raise ExecError(f"--nproc-per-node {nproc}: this machine has {torch.cuda.device_count()} CUDA device(s), one "
                        "per rank is needed", fix=f"start at most {torch.cuda.device_count()} rank(s) here, or run "
                        "on CPU ranks with --device cpu")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # what torchrun sets anyway for N > 1 (without its warning)
    for name in ("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # its failure report is a traceback; ours is one line
    args = get_args_parser().parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "schedsim", "execute",
                                         *argv])
    try:
        run(args)
    except ChildFailedError as e:
        codes = {int(r): int(f.exitcode) for r, f in e.failures.items()}
        first = min(codes)
        code = codes[first] if 0 < codes[first] < 256 else 1
        signals = {r: -c for r, c in codes.items() if c < 0}
        how = (f"rank {first} was killed by signal {signals[first]}" if first in signals
               else f"rank {first} exited with code {codes[first]}")
        print(f"error: {file}: {len(codes)} of {nproc} rank(s) failed; {how} (the ranks' own messages are above)",
              file=sys.stderr, flush=True)
        raise typer.Exit(code) from None
    except SignalException as e:
        print(f"interrupted ({e.sigval.name}); the ranks were stopped", file=sys.stderr, flush=True)
        raise typer.Exit(130) from None
