"""``schedsim search --dask ADDRESS``: the points of a search simulated on a Dask cluster, with the same results as
local worker processes.

Why Dask (``distributed``), not Ray: the points are independent, coarse tasks (0.1-1 s each, a few hundred bytes
in and out), which is exactly what a futures API gives, and ``distributed.Client.submit`` maps one to one onto the
local :class:`concurrent.futures.ProcessPoolExecutor` path of :func:`schedsim.search.search`. Dask is pure Python
(two wheels of about 2.5 MB), runs on the cluster managers users already have (``dask-jobqueue`` for SLURM / PBS /
LSF, ``dask-kubernetes``, ``dask-ssh``, or a ``dask scheduler`` and ``dask worker`` started by hand) and has a
``LocalCluster`` that the tests run on a CPU-only machine. Ray would bring its own runtime (raylet, object store,
a binary wheel of over 60 MB) for no feature the search uses. Dask is an optional dependency
(``pip install 'schedsim[cluster]'``).

How a search runs there (:func:`run_on_dask`):

* ``ADDRESS`` is a scheduler address (``tcp://host:8786``) or ``local`` for a ``LocalCluster`` of ``jobs`` worker
  processes of one thread each on this machine;
* the workers must run the same schedsim version (checked first: a mismatch is refused, exit 2); they do not
  need the profile file: the loaded profile is sent to each worker once (``Client.scatter(..., broadcast=True)``),
  so every point of a worker shares one profile object and its cost model, as in a local worker process;
* each point is one task, with the loader's op estimate as its Dask priority, so the largest run first (as the
  local path hands them out); results go back to their own points, so the rows equal a local search's;
* a worker with several threads runs one point at a time per process (:func:`schedsim.search.worker_point`
  holds a lock: a point pauses the process's cyclic collector and uses per-process caches); start workers with
  ``--nthreads 1`` and as many processes as cores.

Raises
------
SchedsimError
    Dask is not installed, the scheduler cannot be reached, or a worker runs another schedsim version.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["run_on_dask"]


def _version() -> str:
    from schedsim import __version__

    return __version__


def _client(address: str, jobs: int) -> Any:
    from schedsim.errors import SchedsimError

    try:
        import distributed
    except ImportError:
        raise SchedsimError("--dask needs Dask's distributed scheduler, which is not installed",
                            fix="pip install 'schedsim[cluster]' (or pip install distributed)") from None
    import logging

    for lg in ("distributed", "distributed.worker", "distributed.scheduler", "distributed.nanny"):
        logging.getLogger(lg).setLevel(logging.ERROR)
    if address == "local":
        try:
            cluster = distributed.LocalCluster(n_workers=max(1, jobs), threads_per_worker=1, processes=True,
                                               dashboard_address=None)
        except RuntimeError as e:  # e.g. "Nanny failed to start": a worker could not import the caller's script
            raise SchedsimError(f"--dask local: the worker processes did not start ({e})",
                                fix="from a Python script, call the search under `if __name__ == '__main__':` "
                                    "(Dask starts its workers by spawning a fresh interpreter)") from None
        return distributed.Client(cluster), cluster
    try:  # waits up to Dask's distributed.comm.timeouts.connect (30 s by default)
        return distributed.Client(address), None
    except (OSError, TimeoutError, ValueError) as e:
        raise SchedsimError(f"--dask {address}: cannot reach a Dask scheduler there ({e})",
                            fix="give the scheduler's address (tcp://HOST:8786, as `dask scheduler` prints it), "
                                "or --dask local to run on this machine") from None


def run_on_dask(address: str, jobs: int, task: Callable[..., Any], shared: Any, calls: Sequence[tuple[Any, ...]],
                priorities: Sequence[int]) -> list[Any]:
    """``task(token, shared, *call)`` for each call, on the Dask cluster at ``address`` (or ``local``: ``jobs``
    processes of this machine); ``shared`` is sent to each worker once and handed to its tasks as one object;
    ``token`` is new for each call of this function (a worker's caches of an earlier search can be told apart);
    ``priorities``: each call's Dask priority (the higher first). ``task`` must be importable on the workers
    (a module-level function of schedsim). Returns the results in the order of ``calls``.

    Raises
    ------
    SchedsimError
        See the module docstring.
    """
    import uuid

    from schedsim import __version__ as ours
    from schedsim.errors import SchedsimError
    from schedsim.report.progress import track

    client, cluster = _client(address, jobs)
    try:
        theirs = client.run(_version)
        if not theirs:
            raise SchedsimError(f"--dask {address}: the scheduler has no workers",
                                fix="start workers: dask worker ADDRESS --nthreads 1 --nworkers N")
        other = {w: v for w, v in theirs.items() if v != ours}
        if other:
            w, v = next(iter(other.items()))
            raise SchedsimError(f"--dask {address}: worker {w} runs schedsim {v}, this process {ours}",
                                fix="install this schedsim version on every worker")
        import distributed

        one = client.scatter(shared, broadcast=True)
        token = uuid.uuid4().hex
        futs = {client.submit(task, token, one, *c, priority=n, pure=False): i
                for i, (c, n) in enumerate(zip(calls, priorities, strict=True))}
        out: list[Any] = [None] * len(calls)
        for f in track(distributed.as_completed(futs), "search", total=len(futs)):
            out[futs[f]] = f.result()
        return out
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
