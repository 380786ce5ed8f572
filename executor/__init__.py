"""schedsim's executor: run a schedule's DAG for real, under torchrun, and calibrate profiles.

``torchrun --nproc-per-node N -m schedsim execute FILE --out DIR`` builds the same
DAG as ``schedsim predict`` (same loader, same builder), and each rank runs its
own ops with real kernels: NCCL and one CUDA stream per schedule stream on GPUs,
gloo on CPUs. ``schedsim calibrate`` measures a hardware profile.

Modules
-------
* :mod:`executor.commands`: the ``execute`` and ``calibrate`` commands (torch is
  imported lazily inside them, so ``schedsim predict`` never imports torch);
* :mod:`executor.execute`: one rank's run, from the file to the outputs on rank 0,
  and the failure path (``failure_rank<r>.json``, ``partial_rank<r>.json``);
* :mod:`executor.envinfo`: ``env.json``;
* :mod:`executor.dist`: process group setup, world-size check, control group,
  sub-groups, arrival tracking for timeouts;
* :mod:`executor.kernels`: materialising ops as tensors and launch closures;
* :mod:`executor.runtime`: issuing a rank's ops per iteration (eager, CUDA graph,
  CPU host emulation), timing, gathering to rank 0, writing outputs;
* :mod:`executor.timing`: turning per-rank event times into one timeline;
* :mod:`executor.checks`: ``--check`` reference checks per schedule;
* :mod:`executor.profiling`: ``--profiler`` (Kineto) trace → per-op kernel times;
* :mod:`executor.calibrate`: microbenchmarks → profile YAML;
  :mod:`executor.calibrate_logs`: ``--from-nccl-tests`` (no torch).

See ``executor/README.md`` for usage and limits.

Nothing in this package is imported by ``schedsim`` except ``executor.commands``,
which imports no torch at module level.
"""

from __future__ import annotations

from schedsim.errors import SchedsimError

__all__ = ["ExecError", "ExecTimeout"]


class ExecError(SchedsimError):
    """A schedule cannot be executed as asked (bad world size, unsupported op, failed check...)."""


class ExecTimeout(ExecError):
    """An op did not complete within ``--timeout``.

    Attributes
    ----------
    op_id : str
        The op that did not complete (``name@rN``).
    missing : list of int
        Ranks of its group that had not reached it (empty if unknown or none).
    """

    def __init__(self, message: str, op_id: str, missing: list[int] | None = None) -> None:
        self.op_id = op_id
        self.missing = list(missing or [])
        super().__init__(message)
