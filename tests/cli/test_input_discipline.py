"""One reader discipline on every input path (issue 32, items 2-4 and 6): :mod:`schedsim.io`'s readers, the
alias check that counts alias expansion only, the entry points that never show a traceback, and the terminal
safety of :func:`schedsim.errors.printable`. The corpus of bad inputs through every command is
``test_hostile_corpus.py``; these are the units under it, each with the value it must give."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.errors import ProfileError, SchedsimError, SpecError, TraceError, printable
from schedsim.io import check_input, decode_utf8, env_number, open_input, parse_json, read_input, read_text_input

ROOT = Path(__file__).resolve().parents[2]


# -- schedsim.io --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "cls"), [("schedule", SpecError), ("profile", ProfileError),
                                           ("timeline", TraceError), ("csv", SchedsimError)])
def test_special_files_are_refused_before_opening(tmp_path: Path, kind: str, cls: type) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, what in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device"), (tmp_path, "a folder")):
        with pytest.raises(cls, match=f"is {what}") as e:
            read_input(path, kind)  # a FIFO nobody writes would block a plain open() forever
        assert e.value.fix


def test_size_cap_and_empty_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "s.yaml"
    f.write_bytes(b"x" * 100)
    monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", "100")
    assert read_input(f, "schedule") == b"x" * 100
    monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", "99")
    with pytest.raises(SpecError, match="is 100 bytes, past the 99-byte limit"):
        check_input(f, "schedule")
    monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", "ten")
    with pytest.raises(SchedsimError, match="SCHEDSIM_MAX_INPUT_BYTES='ten' is not an integer"):
        check_input(f, "schedule")
    f.write_bytes(b"")
    monkeypatch.delenv("SCHEDSIM_MAX_INPUT_BYTES")
    with pytest.raises(SpecError, match="is empty"):
        check_input(f, "schedule")


def test_read_input_asks_for_the_file_size_not_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 100-byte schedule under the default 512 MiB cap is read by one read(101): read(n) reserves n bytes, so
    asking for the cap reserved 512 MiB for every schedule."""
    import schedsim.io as sio

    f = tmp_path / "s.yaml"
    f.write_bytes(b"z" * 100)
    asked: list[int] = []
    real_open = sio.open_input

    class Reader:
        def __init__(self, fh: Any) -> None:
            self.fh = fh

        def __enter__(self) -> Reader:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()

        def fileno(self) -> int:
            return int(self.fh.fileno())

        def read(self, n: int) -> bytes:
            asked.append(n)
            return bytes(self.fh.read(n))

    monkeypatch.setattr(sio, "open_input", lambda path, kind: Reader(real_open(path, kind)))
    assert read_input(f, "schedule") == b"z" * 100 and asked == [101]


def test_a_file_that_grows_while_read_is_read_to_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_input reads the size fstat gave (+1), then the rest up to the cap when more came: a file stat'ed at 10
    bytes that holds 100 is read whole under a 1,000-byte cap, and refused under a 50-byte one."""
    import schedsim.io as sio

    f = tmp_path / "s.yaml"
    f.write_bytes(b"y" * 100)
    real = os.fstat
    calls = []

    def fstat(fd: int) -> os.stat_result:  # open_input's own check sees the truth; read_input's size is 10
        st = real(fd)
        calls.append(fd)
        if len(calls) % 2 == 0:
            return os.stat_result((*st[:6], 10, *st[7:]))
        return st

    monkeypatch.setattr(sio.os, "fstat", fstat)
    monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", "1000")
    assert read_input(f, "schedule") == b"y" * 100
    monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", "50")
    monkeypatch.setattr(sio, "check_input", lambda path, kind: real_stat(path))
    with pytest.raises(SpecError, match="grew past the 50-byte limit of a schedule file while it was read"):
        read_input(f, "schedule")


def real_stat(path: Path) -> os.stat_result:
    return os.stat(path)


def test_open_input_gives_a_blocking_stream_of_the_file(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_bytes(b'{"a": 1}')
    with open_input(f, "timeline") as fh:
        assert os.get_blocking(fh.fileno()) and fh.read() == b'{"a": 1}'


def test_decoding_names_the_offset_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_bytes(b"name: a\nworld: \xffb\n")
    with pytest.raises(SpecError) as e:
        read_text_input(f, "schedule")
    # the bad byte is the 16th (offset 15): line 2, column 8
    assert str(e.value).startswith(f"{f}:2:8: not UTF-8 text: byte 0xff at offset 15"), str(e.value)
    with pytest.raises(TraceError, match=r"t.json:1:1: not UTF-8"):
        decode_utf8("é".encode("latin-1"), "t.json", "timeline")


def _depth(x: object) -> int:
    """The nesting depth of lists and dicts in a parsed JSON document, by recursion: [] 1, [[1]] 2, 5 0."""
    if isinstance(x, (dict, list)):
        return 1 + max((_depth(v) for v in (x.values() if isinstance(x, dict) else x)), default=0)
    return 0


def test_json_depth_ok_is_the_nesting_depth_within_the_limit() -> None:
    """json_depth_ok walks level by level; it answers depth <= limit as a recursive walk does."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from schedsim.io import json_depth_ok

    docs = st.recursive(st.none() | st.integers() | st.text(max_size=2),
                        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2), c, max_size=3),
                        max_leaves=30)

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(docs, st.integers(1, 7))
    def check(doc: object, limit: int) -> None:
        assert json_depth_ok(doc, limit) == (_depth(doc) <= limit)

    check()
    rows = [{"name": f"k{i}", "ranks": [0], "tags": {"start_us": 1.5}} for i in range(1000)]
    assert json_depth_ok(rows, 3) and not json_depth_ok(rows, 2) and not json_depth_ok([rows], 3)


def test_parse_json_depth_numbers_and_encodings() -> None:
    assert parse_json(b'{"a": [[1]]}', "t", "timeline") == {"a": [[1]]}
    assert parse_json(b'{"a": NaN}', "t", "timeline")["a"] != 0  # the stdlib fallback keeps NaN for the reader
    with pytest.raises(TraceError, match="more than 2 levels"):  # a dict, a list, a list: 3 levels
        parse_json(b'{"a": [[1]]}', "t", "timeline", max_depth=2)
    with pytest.raises(TraceError, match="more than 256 levels"):
        parse_json(b"[" * 100_000 + b"]" * 100_000, "t", "timeline")  # past orjson's and Python's recursion
    with pytest.raises(TraceError, match="not readable JSON"):
        parse_json(b'{"a": ' + b"9" * 5000 + b"}", "t", "timeline")  # past Python's 4,300-digit int limit
    with pytest.raises(TraceError, match="not UTF-8"):
        parse_json('{"a": 1}'.encode("utf-16"), "t", "timeline")  # json.loads would guess UTF-16
    with pytest.raises(TraceError) as e:
        parse_json(b'{"a": \x1b[2J' + b"x" * 10_000, "t", "timeline")
    assert "\x1b" not in str(e.value) and len(str(e.value)) < 400  # a short escaped excerpt


def test_env_numbers() -> None:
    os.environ.pop("SCHEDSIM_X_TEST", None)
    assert env_number("SCHEDSIM_X_TEST", 2.5) == 2.5
    for raw, ok in (("1.5", 1.5), (" 3 ", 3.0), ("0", 0.0)):
        os.environ["SCHEDSIM_X_TEST"] = raw
        assert env_number("SCHEDSIM_X_TEST", 2.5, high=10) == ok
    for raw in ("abc", "nan", "inf", "-1", "11", "\x1b[2J"):
        os.environ["SCHEDSIM_X_TEST"] = raw
        with pytest.raises(SchedsimError, match="SCHEDSIM_X_TEST") as e:
            env_number("SCHEDSIM_X_TEST", 2.5, high=10)
        assert "\x1b" not in str(e.value)
    os.environ.pop("SCHEDSIM_X_TEST")


def test_start_margin_env_is_checked_before_any_rank_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: float() of SCHEDSIM_START_MARGIN_S ran at import of executor.clock, a ValueError traceback
    from executor.clock import START_MARGIN_S, aligned_start_ns, start_margin_s

    monkeypatch.setenv("SCHEDSIM_START_MARGIN_S", "x")
    with pytest.raises(SchedsimError, match="SCHEDSIM_START_MARGIN_S='x' is not a number from 0 to 10"):
        start_margin_s()
    monkeypatch.setenv("SCHEDSIM_START_MARGIN_S", "0.5")
    assert aligned_start_ns([10, 20]) == 20 + 500_000_000
    monkeypatch.delenv("SCHEDSIM_START_MARGIN_S")
    assert start_margin_s() == START_MARGIN_S == 0.002


# -- YAML guards on every YAML input ------------------------------------------------------------------------------


def test_alias_check_counts_alias_expansion_not_literal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 32, item 6: a literal schedule of more nodes than the limit is no alias bomb
    import schedsim.spec.loader as loader
    import schedsim.spec.yaml_reader as yaml_reader

    monkeypatch.setattr(yaml_reader, "MAX_NODES", 1000)
    ops = "".join(f"  - {{name: o{i}, kind: compute, duration_us: 1}}\n" for i in range(400))  # 400 x 7 nodes
    spec = loader.load_text("schema_version: 1\nname: lit\nworld_size: 1\nops:\n" + ops)
    assert len(spec.ops) == 400
    # the same text with an anchor in it is walked, and passes: its aliases add nothing
    spec = loader.load_text("schema_version: 1\nname: &n lit\nworld_size: 1\nops:\n" + ops)
    assert len(spec.ops) == 400
    # aliases adding 1 + 8 x 9 x (1 + 1 + 10 x 9 ...) nodes: a sequence of 9 copies of a 9-item list, 9 times
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [" + ", ".join(["*a"] * 9) + "]\nc: [" + \
        ", ".join(["*b"] * 9) + "]\n"
    # distinct nodes: root 1 + keys 3 + a (10) + b (1) + c (1) = 16; expanded: 1 + 3 + 10 + 91 + 820 = 925 - fits
    yaml_reader.parse_yaml(bomb, "x")
    # the 909 nodes the aliases add, less 16 for each of the 18 aliases written (yaml_reader.ALIAS_NODES): 621 fits,
    # one more is refused
    monkeypatch.setattr(yaml_reader, "MAX_NODES", 925 - 16 - 16 * 18)
    yaml_reader.parse_yaml(bomb, "x")
    monkeypatch.setattr(yaml_reader, "MAX_NODES", 925 - 16 - 16 * 18 - 1)
    with pytest.raises(SpecError, match="expands to more than 620 nodes beyond those written"):
        yaml_reader.parse_yaml(bomb, "x")


@pytest.mark.parametrize(("value", "words"), [
    ("&a [1, *a]", "64 levels"), ("&a {k: *a}", "64 levels"),  # recursive: before, a RecursionError later on
    ("[" * 100 + "]" * 100, "64 levels"),
    ("[" * 5000 + "]" * 5000, "64 levels"),  # past libyaml's own depth limit: before, kept as a string
    ("a\udcffb", "not UTF-8"),
])
def test_set_values_are_guarded_like_schedule_files(value: str, words: str) -> None:
    from schedsim.spec.overrides import parse_overrides

    with pytest.raises(SpecError, match=words) as e:
        parse_overrides([f"x={value}"])
    assert str(e.value).startswith("--set x")


def test_set_values_keep_their_meaning() -> None:
    from schedsim.spec.overrides import parse_overrides

    assert parse_overrides(["a=4", "b=fp16", "c=[1, 2]", "d={k: 1}", "e=a: b: c", "f=#x", "g="]) == \
        {"a": 4, "b": "fp16", "c": [1, 2], "d": {"k": 1}, "e": "a: b: c", "f": None, "g": ""}


def test_profile_alias_bomb_and_recursion_are_refused(tmp_path: Path) -> None:
    from schedsim.hardware.profile import load_profile

    text = (ROOT / "schedsim/hardware/profiles/h200.yaml").read_text()
    laughs = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"] + [
        f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    for name, extra, words in (("bomb", "\n".join(laughs), "expands to more than"),
                               ("rec", "z: &c [1, *c]", "64 levels")):
        f = tmp_path / f"{name}.yaml"
        f.write_text(text + "\n" + extra + "\n")
        with pytest.raises(ProfileError, match=words) as e:
            load_profile(str(f))
        assert str(e.value).startswith(str(f))


# -- entry points ------------------------------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "schedsim", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=ROOT, input=stdin)


def test_an_internal_error_is_one_line_and_a_report_request(monkeypatch: pytest.MonkeyPatch) -> None:
    import schedsim.api as api

    def boom(*a: object, **k: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(api, "lower_spec", boom)
    monkeypatch.delenv("SCHEDSIM_DEBUG", raising=False)
    r = CliRunner().invoke(app, ["check", str(ROOT / "schedules/allgather_mm.yaml")])
    assert r.exit_code == 1 and r.exception is None or isinstance(r.exception, SystemExit)
    assert r.stderr.splitlines()[0] == "error: internal error: ZeroDivisionError: boom"
    assert "please report" in r.stderr and "schedsim 0." in r.stderr and "Traceback" not in r.stderr
    r = CliRunner().invoke(app, ["--debug", "check", str(ROOT / "schedules/allgather_mm.yaml")])
    assert isinstance(r.exception, ZeroDivisionError)  # --debug lets the traceback through
    monkeypatch.delenv("SCHEDSIM_DEBUG", raising=False)


def test_printing_never_fails_on_what_is_printed(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("schema_version: 1\nname: \"sch\u00e9ma_\u65e5\u672c\"\nworld_size: 1\nops:\n"
                 "  - {name: o, kind: compute, duration_us: 1}\n")
    r = _cli("check", str(f), env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0 and "sch\\xe9ma_\\u65e5\\u672c" in r.stdout, r.stderr
    bad = str(tmp_path).encode() + b"/\xff.yaml"  # a file name that is not UTF-8
    r = subprocess.run([sys.executable, "-m", "schedsim", "check", bad], capture_output=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}, cwd=ROOT)
    assert r.returncode == 2 and b"\\udcff.yaml: no such file" in r.stderr, r.stderr


# -- terminal safety ---------------------------------------------------------------------------------------------


def test_printable_escapes_controls_and_keeps_text() -> None:
    assert printable("a\x1b[2Jb\rc\x07\x7f\x9b") == "a\\x1b[2Jb\\x0dc\\x07\\x7f\\x9b"
    assert printable("x\u202ey\ud800") == "x\\u202ey\\ud800"
    assert printable("é 日本 ok\ttab") == "é 日本 ok\\x09tab"
    assert printable("a\nb") == "a\\x0ab" and printable("a\nb", newlines=True) == "a\nb"
    cut = printable("x" * 1000, 50)
    assert cut == "x" * 42 + "… (+958)"  # 50 characters, the note counting what it cut


def test_errors_and_names_reach_the_terminal_escaped_and_short(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("schema_version: 1\nname: \"a\\e[2Jb\"\nworld_size: 1\nops:\n  - {name: o, kind: compute, "
                 "duration_us: 1}\n")
    r = CliRunner().invoke(app, ["check", str(f)])
    assert r.exit_code == 0 and "a\\x1b[2Jb" in r.stdout and "\x1b" not in r.stdout
    f.write_text("schema_version: 1\nname: n\nworld_size: 1\nops:\n  - {name: o, kind: compute, duration_us: \""
                 + "\x1b" * 10 + "z" * 3_000_000 + "\"}\n")
    r = CliRunner().invoke(app, ["check", str(f)])
    assert r.exit_code == 2 and "\x1b" not in r.stderr and len(r.stderr) < 25_000, len(r.stderr)
