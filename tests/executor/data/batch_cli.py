"""Run several ``schedsim`` commands in one torchrun launch (argv: a JSON file with a list of argv lists;
an argv ``["python", SCRIPT, ARGS...]`` runs that script as ``__main__`` instead).

A torchrun start costs seconds on a 2-core machine (every rank and the agent import torch), so the executor
tests that only need a run's outputs share one launch per world size. Each command runs in-process through
the CLI exactly as ``torchrun -m schedsim ARGS`` would (``execute`` sets up and tears down its process
groups each time). Before and after each one, rank 0 prints a marker to stdout and stderr::

    ==== schedsim job <i> begin
    ==== schedsim job <i> end rc=<exit code>

so a test can cut its own command's output and exit code out of the shared run (:func:`exec_helpers.split_jobs`).

Each command rendezvous on a store of its own: torch names process groups by a counter that restarts when
the default group is destroyed, so a second command's groups would find the first one's addresses under the
same keys of torchrun's agent store (seen 2026-12-01, torch 2.11: gloo "Connection refused"). Rank 0 picks a
free port per command and publishes it on the agent store; ``init_process_group`` (env://) then starts a new
TCPStore there.
"""

import datetime
import json
import os
import runpy
import socket
import sys
from pathlib import Path

import torch.distributed as dist

from schedsim.cli import app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    env = os.environ
    rank0 = env.get("RANK", "0") == "0"
    agent = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), int(env["WORLD_SIZE"]), False,
                          timeout=datetime.timedelta(seconds=120))
    run_id = env.get("TORCHELASTIC_RUN_ID", "")

    def mark(text: str) -> None:
        if rank0:
            for f in (sys.stdout, sys.stderr):
                print(text, file=f, flush=True)

    for i, argv in enumerate(jobs):
        key = f"schedsim_batch/{run_id}/{i}/port"
        if rank0:
            agent.set(key, str(_free_port()))
        env["MASTER_PORT"] = agent.get(key).decode()
        env["TORCHELASTIC_USE_AGENT_STORE"] = "False"
        mark(f"==== schedsim job {i} begin")
        try:
            if argv[0] == "python":
                sys.argv = argv[1:]
                runpy.run_path(argv[1], run_name="__main__")
                rc = 0
            else:
                rc = app(args=argv, prog_name="schedsim", standalone_mode=False)
        except SystemExit as e:
            rc = e.code
        mark(f"==== schedsim job {i} end rc={rc or 0}")


if __name__ == "__main__":
    main()
