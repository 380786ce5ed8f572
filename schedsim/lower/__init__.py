"""Lowering: a validated :class:`~schedsim.spec.model.ScheduleSpec` to a frozen :class:`Program`.

``lower(spec)`` expands the hand-written ops (one row per op entry, instanced on its ranks in bulk; entries
equal but for name, dependencies and tags share a template; a loader ``foreach`` block is added as arrays,
:mod:`schedsim.lower.written`) and the pipeline block (:mod:`schedsim.lower.pipeline`) into op columns, links
them into integer dependency, edge, collective and send/recv arrays (:mod:`schedsim.lower.link`; when every
op runs on all ranks, rank 0's are linked and repeated), and runs the static checks on those arrays
(:mod:`schedsim.lower.checks`). The simulator reads the Program; networkx is built from it on demand
(:func:`schedsim.graph.build.graph_of`).
"""

from __future__ import annotations

import sys
import types
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from schedsim.lower.program import Program

if TYPE_CHECKING:
    from schedsim.spec.model import ScheduleSpec

__all__ = ["Program", "check_program", "lower"]


def lower(spec: ScheduleSpec, check: bool = True, symmetric: bool = False, warn: bool = True,
          sweep: bool = True) -> Program:
    """Lower ``spec`` (a ScheduleSpec) to a :class:`Program`; with ``check``, run the static checks. With
    ``symmetric``, a ``training:`` block writes only one representative rank of each class of ranks that run
    alike (:func:`schedsim.lower.training.represented_ranks`, recorded in :attr:`Program.represented`); the
    Program then holds only their ops, and each collective only its represented members. Without ``warn``, the
    warnings that are only words (send/recv names suggesting another pairing, "may hang") are not worked out
    (:attr:`Program.warnings` holds the others): ``schedsim search``, which keeps none; the checks that raise
    run as with it. ``sweep=False`` (``schedsim search`` again): a Program lowered from a ``training:`` block alone
    (no written op, no ``pipeline:`` block) skips the sweep of NCCL's wait-for graph
    (:func:`schedsim.lower.checks.check_arrays`' ``generated``), which the block's own lowering passes by
    construction (tests/lower/test_training_hang_free.py); any other Program keeps every check.

    Raises
    ------
    SpecError
        A bad pipeline block; ops in a CUDA graph that could not be captured
        (:func:`schedsim.lower.graphs.check_graph_segments`).
    GraphError, DeadlockError, CycleError
        As :func:`schedsim.graph.build.build_graph` (unknown or self dependencies, duplicate names,
        mismatched collectives or send/recv, cycles, NCCL hangs), with op names, the issue grid and a fix.
    """
    from schedsim._gc import paused_gc
    from schedsim.lower.link import link
    from schedsim.lower.table import Table
    from schedsim.lower.written import add_written

    with paused_gc():
        table = Table()
        add_written(spec, table)
        generated = not sweep and table.empty() and spec.pipeline is None and spec.training is not None
        pipeline = None
        represented: tuple[int, ...] = ()
        if spec.pipeline is not None:
            from schedsim.lower.pipeline import expand_pipeline

            pipeline = expand_pipeline(spec, table)
        conns = cast("int | None", spec.env.get("CUDA_DEVICE_MAX_CONNECTIONS"))  # an int 1-32 (ScheduleSpec._env)
        if spec.training is not None:
            from schedsim.lower.training import expand_training

            pipeline = expand_training(spec, table, symmetric)
            if symmetric:
                from schedsim.lower.training import represented_ranks

                represented = represented_ranks(spec)
            if conns is None and spec.training.tensor_model_parallel_size > 1 and not spec.training.use_torch_fsdp2:
                conns = 1  # Megatron-LM requires it with TP, but not with FSDP2 (schedsim.lower.training)
        info: dict[str, Any] = {"name": spec.name, "world_size": spec.world_size, "launch": spec.launch}
        if conns is not None:
            info["max_connections"] = conns
        if spec.nccl_init != "lazy":
            info["nccl_init"] = spec.nccl_init
        if represented:
            info["represented"] = represented
        if pipeline is not None:
            info["pipeline"] = pipeline  # G.graph's form (to_dict) only when the reference build words an error
        cols, linked = link(table, spec._file, info, check, warn)
        uniform = bool(linked.pop("uniform", False))  # rank 0's ops on every rank (link._link_uniform)
        c = cols.c
        if spec.training is not None:  # its host synchronisations (rule host-wait), as tags of the ops after them
            from schedsim.lower.training_tail import host_sync_tags

            synced = host_sync_tags(spec.training, table, c["rank"], c["tags"])
            if synced is not None:
                c["tags"] = synced
        prog = Program(spec.name, spec.world_size, spec.launch, spec._file, conns, pipeline, tuple(table.templates),
                       table.names, table.tags, tuple(table.streams.items),
                       table.strs, c["tmpl"], c["rank"], c["seq"], c["name"], c["tags"], c["stream"],
                       c["peer"], c["batch"], c["msg"], **linked, nccl_init=spec.nccl_init,
                       represented=represented)
        del cols, c, linked  # the link's own arrays (its int64 edges, which the Program holds narrowed): not held
        # through the static checks (the `rank` ring's high-water mark, 61 MiB at 1M ops)
        from schedsim.lower.graphs import check_graph_segments

        check_graph_segments(prog)
        from schedsim.lower.p2p_comms import check_p2p_groups

        check_p2p_groups(prog)
        if check:
            prog = replace(prog, warnings=prog.warnings + tuple(check_program(prog, uniform, warn, generated)),
                         checked=True)
        return prog


def check_program(prog: Program, uniform: bool = False, warn: bool = True, generated: bool = False) -> list[str]:
    """Run every static check on ``prog`` (:func:`schedsim.lower.checks.check_arrays`, ``uniform`` passed on: a
    Program linked as rank 0's ops on every rank; ``generated``: a ``training:`` block's own lowering, its
    wait-for graph not swept); returns the extra "may hang" warnings
    (:func:`schedsim.lower.check_errors.hang_warnings`, then the split-batch one), those worded by
    ``hang_warnings`` only with ``warn``.

    Raises
    ------
    CycleError, DeadlockError, GraphError
        Worded from the array rules' witnesses (:func:`schedsim.lower.check_errors.word_fault`).
    """
    from schedsim.lower.checks import check_arrays

    v = check_arrays(prog, uniform, hangs=warn, generated=generated)  # without warn the "may hang" cases are not worded
    if v.fault:
        from schedsim.lower.check_errors import word_fault

        err = word_fault(prog)
        if err is None:
            raise AssertionError("the array checks found a fault that no rule's witness names; please report it")
        raise err
    extra = [v.split] if v.split else []
    if not (v.word_warnings and warn):
        return extra
    from schedsim.lower.check_errors import hang_warnings

    return [w for w in hang_warnings(prog, v.cross, v.eager, v.multi) if w not in prog.warnings] + extra


class _LowerPackage(types.ModuleType):
    """This package is also ``schedsim``'s public :func:`lower`: once it is imported, ``schedsim.lower`` (and so
    ``from schedsim import lower``) is the package, not the function, so calling the package lowers."""

    def __call__(self, spec: ScheduleSpec, check: bool = True, symmetric: bool = False, warn: bool = True) -> Program:
        return lower(spec, check, symmetric, warn)


sys.modules[__name__].__class__ = _LowerPackage
