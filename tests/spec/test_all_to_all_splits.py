"""``all_to_all`` with per-peer sizes (``send_bytes`` / ``recv_bytes``, Megatron-LM#7488): the forms a user of
``all_to_all_single(output_split_sizes, input_split_sizes)`` writes, and bad input named on its field (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app

HEAD = "schema_version: 1\nname: a2a\nworld_size: 3\nops:\n"
MATRIX = "  - {name: x, kind: all_to_all, send_bytes: [[0, 4000, 8000], [12, 0, 0], [400, 400, 0]]}\n"
LISTS = """\
  - {name: y, kind: all_to_all, ranks: [0], group: [0, 1, 2], send_bytes: [0, 6, 8], recv_bytes: [0, 12, 400]}
  - {name: y, kind: all_to_all, ranks: [1], group: [0, 1, 2], send_bytes: [12, 0, 4], recv_bytes: [6, 0, 400]}
  - {name: y, kind: all_to_all, ranks: [2], group: [0, 1, 2], send_bytes: [400, 400, 0], recv_bytes: [8, 4, 0]}
"""


def _check(tmp_path: Path, text: str) -> tuple[int, str]:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    r = CliRunner().invoke(app, ["check", str(p)])
    return r.exit_code, r.stderr if r.exit_code else r.stdout


def test_matrix_and_per_rank_lists_lower_to_each_rank_s_row_and_column(tmp_path: Path) -> None:
    from schedsim.api import lower_spec
    from schedsim.spec.loader import load_text

    assert _check(tmp_path, HEAD + MATRIX + LISTS)[0] == 0
    ops = {o.id: o for o in lower_spec(load_text(HEAD + MATRIX + LISTS)).ops()}
    assert ops["x@r0"].splits == ((0, 4000, 8000), (0, 12, 400)) and ops["x@r0"].nbytes == 12000
    assert ops["x@r2"].splits == ((400, 400, 0), (8000, 0, 0)) and ops["x@r2"].nbytes == 8000
    assert ops["y@r1"].splits == ((12, 0, 4), (6, 0, 400)) and ops["y@r1"].nbytes == 406
    assert {o.group for o in ops.values()} == {(0, 1, 2)}


@pytest.mark.parametrize(("text", "line", "field", "words"), [
    (MATRIX.replace("[12, 0, 0]", "[12, 0]"), 5, "send_bytes", "needs 3 rows of 3 entries; row 1 has 2 entries"),
    (MATRIX.replace("[400, 400, 0]]", "[400, 400, 0], [1, 1, 1]]"), 5, "send_bytes",
     "needs 3 rows of 3 entries; 4 rows"),
    (MATRIX.replace("[12, 0, 0]", "[-12, 0, 0]"), 5, "send_bytes", "send_bytes[1][0] is -12, a negative size"),
    (MATRIX.replace("}", ", recv_bytes: [0, 0, 0]}"), 5, "recv_bytes", "whose columns are what each member receives"),
    (MATRIX.replace("all_to_all", "all_gather"), 5, "send_bytes", "only all_to_all takes send_bytes"),
    (MATRIX.replace("send_bytes", "bytes: 8, send_bytes"), 5, "x", "not both"),
    (MATRIX.replace("send_bytes", "buffer: shard, send_bytes"), 5, "ops[0]",
     "`buffer` sizes `bytes`/`shape`; per-peer sizes are each rank's own bytes"),
    (LISTS.replace("send_bytes: [0, 6, 8]", "send_bytes: [0, 6]"), 5, "send_bytes",
     "send_bytes has 2 sizes but its group has 3"),
    (LISTS.replace("recv_bytes: [6, 0, 400]", "recv_bytes: [6, -1, 400]"), 6, "recv_bytes", "recv_bytes[1] is -1"),
    (LISTS.replace(", recv_bytes: [8, 4, 0]", ""), 7, "recv_bytes", "gives send_bytes as a list (this rank's) but no"),
    (LISTS.replace("recv_bytes: [6, 0, 400]", "recv_bytes: [7, 0, 400]"), 6, "recv_bytes",
     "rank 0 sends 6 bytes to rank 1, but rank 1 receives 7 bytes from rank 0"),
    (LISTS.replace("send_bytes: [400, 400, 0], recv_bytes: [8, 4, 0]", "bytes: 800"), 7, "send_bytes",
     "has per-peer sizes on rank 0 but not on rank 2"),
    (MATRIX.replace("[12, 0, 0]", "[100000000000000000000000, 0, 0]"), 5, "send_bytes",
     "send_bytes[1][0] is 100000000000000000000000, above the limit of 1,152,921,504,606,846,976 bytes"),
    (MATRIX.replace("[12, 0, 0]", "[1000000000000000000, 1000000000000000000, 0]"), 5, "send_bytes",
     "moves 2,000,000,000,000,000,000 bytes on one rank, above the limit"),
    (LISTS.replace("recv_bytes: [6, 0, 400]", "recv_bytes: [6, 10000000000000000000000, 400]"), 6, "recv_bytes",
     "recv_bytes[1] is 10000000000000000000000, above the limit"),
])
def test_bad_sizes_exit_2_naming_the_field(tmp_path: Path, text: str, line: int, field: str, words: str) -> None:
    code, err = _check(tmp_path, HEAD + text)
    assert code == 2, err
    first = err.splitlines()[0]
    assert words in first and f"s.yaml:{line}:" in first and field in first, first
    assert "Traceback" not in err
