"""Load + lower time of a nested ``foreach`` whose inner loop is small, on the block path and per iteration.

An inner ``foreach`` is one block per outer iteration; small blocks cost more than they save, so after
``block.SMALL_BLOCKS_KEPT`` small blocks of one body the loader expands that body per iteration. Prints CPU
seconds (``time.process_time``) for each shape, for the loader as shipped and with blocks off
(``foreach.TEMPLATES = False``, the general path).

    python benchmarks/speed/foreach_nested.py
"""

from __future__ import annotations

import time

from schedsim.lower import lower
from schedsim.spec import foreach
from schedsim.spec.loader import load_text

TEXT = """\
schema_version: 1
name: nested
world_size: 2
ops:
  - foreach: {i: range(%d)}
    ops:
      - foreach: {j: range(%d)}
        ops:
          - {name: "mm{i}_{j}", kind: matmul, m: 256, n: 256, k: "{64 * (j + 1)}", dtype: bf16}
          - {name: "ar{i}_{j}", kind: all_reduce, bytes: 4096, deps: ["mm{i}_{j}"]}
"""


def main() -> None:
    print(f"{'outer x inner':>14} {'ops':>8} {'shipped s':>10} {'per iteration s':>16}")
    for outer, inner in ((20000, 2), (2000, 20), (200, 200)):
        text = TEXT % (outer, inner)
        row = []
        for blocks in (True, False):
            foreach.TEMPLATES = blocks
            t0 = time.process_time()
            n = lower(load_text(text, "nested.yaml")).N
            row.append(time.process_time() - t0)
        foreach.TEMPLATES = True
        print(f"{outer:>7} x {inner:<4} {n:>8,} {row[0]:>10.2f} {row[1]:>16.2f}")


if __name__ == "__main__":
    main()
