"""Run under torchrun (gloo; a job of the shared launch, ``exec_helpers.gloo2_jobs``): one ``schedsim execute`` through
the CLI, in process, with ``torch.distributed.all_reduce`` wrapped to record the depth of the Python stack at each
call (the calling frame counted, the wrapper not), and write what it saw as JSON.

PyTorch's NCCL Flight Recorder gathers the calling thread's whole Python stack on every collective, so that depth is
what it costs (docs/validation.md, issue 39, "gpu39aa"). The test reads, per rank: ``calls`` (``"depth thread: co_name
< co_name ..."`` → count, the calling frames innermost first) and ``caller_depth`` (the depth of this script's own
frame, where ``execute`` was called from). argv: output folder, then the ``execute`` arguments.
"""

import json
import os
import sys
import threading
from pathlib import Path

import torch.distributed as dist

from schedsim.cli import app


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    calls: dict[str, int] = {}
    orig = dist.all_reduce

    def all_reduce(*a, **k):  # type: ignore[no-untyped-def]
        f = sys._getframe(1)
        names = []
        while f is not None:
            names.append(f.f_code.co_name)
            f = f.f_back
        key = f"{len(names)} {threading.current_thread().name}: " + " < ".join(names)
        calls[key] = calls.get(key, 0) + 1
        return orig(*a, **k)

    here = 0
    f = sys._getframe(0)
    while f is not None:
        here += 1
        f = f.f_back
    dist.all_reduce = all_reduce  # before execute binds its collectives (executor.kernels.Materializer)
    try:
        rc = app(args=["execute", *sys.argv[2:]], prog_name="schedsim", standalone_mode=False)
    finally:
        dist.all_reduce = orig
    rank = os.environ.get("RANK", "0")
    (out / f"depth_rank{rank}.json").write_text(json.dumps({"rc": rc, "caller_depth": here, "calls": calls},
                                                           indent=1))


if __name__ == "__main__":
    main()
