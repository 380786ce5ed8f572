"""Execute, on this launch's ranks, the schedule of toy communication kinds (``toy``) or the same schedule written
with the kinds they copy (``shipped``) (``tests/spec/test_kind_registry.py``: ``TOY_COMM_KINDS``,
``comm_schedule``), small enough for CPU ranks. The toy entries are registered in this process only, and removed
after. One ``execute`` per launch job: a second one in the same job would find the first one's process-group
addresses (``data/batch_cli.py``).

argv: OUT WHICH (``toy`` or ``shipped``): the run's outputs go to OUT/WHICH.
"""

import sys
from pathlib import Path

from schedsim.cli import app
from schedsim.kinds import KINDS
from tests.spec.test_kind_registry import TOY_COMM_KINDS, comm_schedule


def main() -> None:
    out, name = Path(sys.argv[1]), sys.argv[2]
    out.mkdir(parents=True, exist_ok=True)
    for info in TOY_COMM_KINDS.values():
        KINDS[info.name] = info  # the registry rebuilds the spec models
    try:
        path = out / f"{name}.yaml"
        path.write_text(comm_schedule(2, toy=name == "toy", side=32, mb=0.001))
        rc = app(args=["execute", str(path), "--iters", "2", "--warmup", "1", "--lean-iters", "0", "--timeout", "30",
                       "--no-gantt", "--out", str(out / name)], prog_name="schedsim", standalone_mode=False)
        if rc:
            sys.exit(rc)
    finally:
        for info in TOY_COMM_KINDS.values():
            del KINDS[info.name]


main()
