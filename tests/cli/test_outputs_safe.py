"""Issue 32, outputs: a command writes and replaces only the files it writes itself, in this run.

Each command keeps its own set in an output folder (recorded with content hashes in ``.schedsim-outputs.json``);
a manifest never makes schedsim delete a file; only regular files are replaced; ``-`` is standard output;
a held lock on the output folder is waited for a bounded time, then named.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.outdir import MANIFEST

ROOT = Path(__file__).resolve().parents[2]
SCHED = ROOT / "schedules" / "allgather_mm.yaml"
PIPE = ROOT / "tests" / "data" / "pp_unit.yaml"
KINETO = ROOT / "tests" / "data" / "kineto_execute_offload_h200_rank0.json.gz"
NCCL_LOG = ROOT / "tests" / "data" / "hostile" / "nccl_nan_busbw.log"


def run(args: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, args, env=env)


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and p.name != MANIFEST}


@pytest.fixture(scope="module")
def predicted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A predict folder with charts: timeline.json, trace.json, gantt.png, gantt.svg."""
    d = tmp_path_factory.mktemp("pred") / "p"
    r = run(["predict", str(SCHED), "--out", str(d)])
    assert r.exit_code == 0, r.output
    return d


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _good_nccl_log(tmp: Path) -> Path:
    good = tmp / "ok.log"
    good.write_text(NCCL_LOG.read_text().replace(" nan ", " 0.20 "))
    return good


# -- a manifest never deletes a file ---------------------------------------------------------------------------


def _commands(tmp: Path, d: Path, predicted: Path) -> dict[str, list[str]]:
    """Every command that writes into a folder or a file there, with ``d`` as its output folder."""
    return {
        "predict": ["predict", str(SCHED), "--out", str(d), "--no-gantt"],
        "sweep": ["sweep", str(SCHED), "--set", "chunks=1,2", "--out", str(d), "--keep-timelines"],
        "analyze": ["analyze", str(predicted / "timeline.json"), "--charts", str(d)],
        "import": ["import", "kineto", str(KINETO), "--out", str(d)],
        "compare": ["compare", str(predicted), str(predicted), "--out", str(d), "--no-gantt"],
        "schema": ["schema", "-o", str(d / "schema.json")],
        "calibrate": ["calibrate", "--from-nccl-tests", str(_good_nccl_log(tmp)), "-o", str(d / "p.yaml")],
    }


@pytest.mark.parametrize("planted", ["list", "v2"])
def test_a_planted_manifest_never_deletes_a_users_file(tmp_path: Path, predicted: Path, planted: str) -> None:
    # before: a .schedsim-outputs.json naming notes.txt made every set-writing command delete notes.txt. Now a
    # file goes only if this schedsim recorded writing that very content; the older list manifest is ignored
    # with a warning, and a v2 one whose hash does not match the file removes nothing either
    for name, args in _commands(tmp_path, tmp_path / "x", predicted).items():
        d = tmp_path / name
        d.mkdir()
        (d / "notes.txt").write_bytes(b"my notes\x00\xff\n")
        if planted == "list":
            doc: object = ["notes.txt", "../notes.txt", "timeline_x.json"]
        else:
            doc = {"format": "schedsim.outputs", "version": 2,
                   "sets": {c: {"notes.txt": hashlib.sha256(b"other content").hexdigest()}
                            for c in ("predict", "sweep", "analyze", "import", "compare", "execute")}}
        (d / MANIFEST).write_text(json.dumps(doc))
        args = [str(d) if a == str(tmp_path / "x") else a.replace(str(tmp_path / "x"), str(d)) for a in args]
        r = run(args)
        assert r.exit_code == 0, (name, r.output)
        assert (d / "notes.txt").read_bytes() == b"my notes\x00\xff\n", name
        if planted == "list" and name not in ("schema", "calibrate"):
            assert "warning: ignoring" in r.output and "not a manifest this schedsim wrote" in r.output, name
        # and a second run (now over its own recorded set) still keeps it
        assert run(args).exit_code == 0, name
        assert (d / "notes.txt").read_bytes() == b"my notes\x00\xff\n", name


def test_manifest_records_content_hashes_per_command(tmp_path: Path, predicted: Path) -> None:
    d = _copy(predicted, tmp_path / "p")
    doc = json.loads((d / MANIFEST).read_text())
    assert doc["format"] == "schedsim.outputs" and set(doc["sets"]) == {"predict"}
    files = doc["sets"]["predict"]
    assert set(files) == {"timeline.json", "trace.json", "gantt.png", "gantt.svg", "memory.png"}
    for n, h in files.items():
        assert hashlib.sha256((d / n).read_bytes()).hexdigest() == h


# -- two commands in one folder -----------------------------------------------------------------------------------


def test_analyze_charts_into_the_predict_folder_it_reads_is_refused(tmp_path: Path, predicted: Path) -> None:
    # before: `analyze D/timeline.json --charts D` deleted timeline.json (the file it had just read), trace.json and
    # gantt.svg. Its gantt.png would replace predict's: the folder is refused with a fix, nothing changes
    d = _copy(predicted, tmp_path / "p")
    before = snapshot(d)
    r = run(["analyze", str(d / "timeline.json"), "--charts", str(d)])
    assert r.exit_code == 2, r.output
    assert "gantt.png: holds `predict`'s output of that name" in r.output and "fix: write to another folder" in r.output
    assert snapshot(d) == before
    assert "Traceback" not in r.output


def test_analyze_charts_beside_predict_without_charts_keeps_predicts_files(tmp_path: Path) -> None:
    d = tmp_path / "p"
    assert run(["predict", str(SCHED), "--out", str(d), "--no-gantt"]).exit_code == 0
    before = snapshot(d)
    r = run(["analyze", str(d / "timeline.json"), "--charts", str(d)])
    assert r.exit_code == 0, r.output
    after = snapshot(d)
    assert {n: after[n] for n in before} == before and "gantt.png" in after
    sets = json.loads((d / MANIFEST).read_text())["sets"]
    assert set(sets["predict"]) == {"timeline.json", "trace.json"} and "gantt.png" in sets["analyze"]
    # predict again, now with charts: gantt.png is analyze's, so predict refuses rather than replace it
    r = run(["predict", str(SCHED), "--out", str(d)])
    assert r.exit_code == 2 and "holds `analyze`'s output" in r.output
    assert snapshot(d) == after


def test_sweep_and_compare_into_a_predict_folder_keep_predicts_files(tmp_path: Path, predicted: Path) -> None:
    # before: sweep --out into a predict folder deleted predict's timeline.json, trace.json and charts
    d = _copy(predicted, tmp_path / "p")
    before = snapshot(d)
    assert run(["sweep", str(SCHED), "--set", "chunks=1,2", "--out", str(d)]).exit_code == 0
    assert run(["compare", str(d), str(d), "--out", str(d), "--no-gantt"]).exit_code == 0
    after = snapshot(d)
    assert {n: after[n] for n in before} == before
    assert {"sweep.json", "sweep.png", "compare.json", "compare_trace.json"} <= set(after)
    # and predict again replaces its own set only
    assert run(["predict", str(SCHED), "--out", str(d), "--no-gantt"]).exit_code == 0
    again = snapshot(d)
    assert {"sweep.json", "sweep.png", "compare.json", "timeline.json"} <= set(again)
    assert "gantt.png" not in again  # predict's own earlier chart, unchanged since: its set now has none


def test_import_into_a_predict_folder_is_refused(tmp_path: Path, predicted: Path) -> None:
    d = _copy(predicted, tmp_path / "p")
    before = snapshot(d)
    r = run(["import", "kineto", str(KINETO), "--out", str(d)])
    assert r.exit_code == 2 and "timeline.json: holds `predict`'s output" in r.output, r.output
    assert snapshot(d) == before


def test_an_edited_output_is_neither_replaced_nor_removed(tmp_path: Path) -> None:
    d = tmp_path / "p"
    assert run(["predict", str(PIPE), "--out", str(d)]).exit_code == 0
    assert (d / "pipeline.png").exists()
    (d / "pipeline.png").write_bytes(b"annotated by hand")
    # a non-pipeline schedule would remove the earlier pipeline.png: not once the user changed it
    r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"])
    assert r.exit_code == 0, r.output
    assert (d / "pipeline.png").read_bytes() == b"annotated by hand"
    assert "kept" in r.output and "pipeline.png" in r.output
    (d / "timeline.json").write_text("my edit")
    r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"])
    assert r.exit_code == 2 and "timeline.json: exists and schedsim did not record writing it" in r.output
    assert (d / "timeline.json").read_text() == "my edit"


# -- only regular files are replaced ------------------------------------------------------------------------


def test_dash_and_dev_stdout_write_to_standard_output(tmp_path: Path) -> None:
    # before: -o /dev/stdout printed nothing (the device was replaced by a regular file, or refused)
    want = run(["schema"]).output
    for target in ("-", "/dev/stdout"):
        p = subprocess.run([sys.executable, "-m", "schedsim", "schema", "-o", target], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout) == json.loads(want)
    r = run(["analyze", str(ROOT / "tests" / "data" / "kineto_execute_offload_h200_predicted_timeline.json"),
             "--chrome", "-", "--format", "json"])
    assert r.exit_code == 0 and r.output.startswith('{"traceEvents":')


def test_special_files_are_refused_with_exit_2(tmp_path: Path, predicted: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_dir = tmp_path / "dir"
    sock_dir.mkdir()
    tl = predicted / "timeline.json"
    cases = [
        (["schema", "-o", str(fifo)], "is a FIFO"),
        (["schema", "-o", "/dev/zero"], "is a character device"),
        (["schema", "-o", str(sock_dir)], "is a folder"),
        (["calibrate", "--from-nccl-tests", str(_good_nccl_log(tmp_path)), "-o", str(fifo)], "is a FIFO"),
        (["analyze", str(tl), "--chrome", str(fifo)], "is a FIFO"),
        (["analyze", str(tl), "--chrome", "/dev/zero"], "is a character device"),
        (["analyze", str(tl), "--charts", str(fifo)], "is a FIFO, not a folder"),
        (["predict", str(SCHED), "--out", str(fifo)], "is a FIFO, not a folder"),
        (["predict", str(SCHED), "--out", "/dev/null"], "is a character device, not a folder"),
        (["predict", str(SCHED), "--out", "-"], "not one stream"),
        (["compare", str(tl), str(tl), "--out", "/dev/zero"], "not a folder"),
        (["sweep", str(SCHED), "--set", "chunks=1", "--out", str(fifo)], "not a folder"),
        (["import", "kineto", str(KINETO), "--out", str(fifo)], "not a folder"),
    ]
    for args, what in cases:
        r = run(args)
        assert r.exit_code == 2, (args, r.output)
        assert what in r.output and "fix:" in r.output, (args, r.output)
        assert stat.S_ISFIFO(fifo.lstat().st_mode) and sock_dir.is_dir()
    # a FIFO, link or folder where a set's file goes is refused too (never renamed over)
    d = tmp_path / "o"
    d.mkdir()
    os.mkfifo(d / "timeline.json")
    r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"])
    assert r.exit_code == 2 and "timeline.json: is a FIFO" in r.output
    assert stat.S_ISFIFO((d / "timeline.json").lstat().st_mode)


def test_dev_null_is_a_sink_and_a_link_is_written_through(tmp_path: Path) -> None:
    assert run(["schema", "-o", "/dev/null"]).exit_code == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    target = tmp_path / "real.json"
    assert run(["schema", "-o", str(target)]).exit_code == 0  # schema's own earlier output: replaced through a link
    (tmp_path / "link.json").symlink_to(target)
    assert run(["schema", "-o", str(tmp_path / "link.json")]).exit_code == 0
    assert (tmp_path / "link.json").is_symlink() and json.loads(target.read_text())["title"]


def test_the_input_file_is_never_the_output(tmp_path: Path, predicted: Path) -> None:
    d = _copy(predicted, tmp_path / "p")
    before = snapshot(d)
    r = run(["analyze", str(d / "timeline.json"), "--chrome", str(d / "timeline.json")])
    assert r.exit_code == 2 and "is the input file" in r.output
    log = _good_nccl_log(tmp_path)
    text = log.read_text()
    r = run(["calibrate", "--from-nccl-tests", str(log), "-o", str(log)])
    assert r.exit_code == 2 and "is the input file" in r.output and log.read_text() == text
    base = tmp_path / "mine.yaml"  # the --base profile file is an input too: it was replaced by the fit
    base.write_text("base: dgx_h100\nname: mine\n")
    r = run(["calibrate", "--from-nccl-tests", str(log), "--base", str(base), "-o", str(base)])
    assert r.exit_code == 2 and f"--out {base}: is the input file {base}; not overwritten" in r.output
    assert base.read_text() == "base: dgx_h100\nname: mine\n"
    assert snapshot(d) == before


# -- a held lock ----------------------------------------------------------------------------------------------


def test_a_held_lock_is_waited_for_a_bounded_time_and_named(tmp_path: Path) -> None:
    # before: predict waited forever on a folder another process held locked, saying nothing
    d = tmp_path / "o"
    d.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
                               "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
                               "time.sleep(60)", str(d)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"], env={"SCHEDSIM_LOCK_WAIT_S": "0.3"})
        assert r.exit_code == 2, r.output
        assert "waiting up to 0.3 s for the lock on output folder" in r.output
        assert f"stayed locked for 0.3 s by pid {holder.pid}" in r.output and "fix:" in r.output
        assert [p.name for p in d.iterdir()] == []
        r = run(["schema"], env={"SCHEDSIM_LOCK_WAIT_S": "x"})  # not read by commands that take no lock
        assert r.exit_code == 0
        r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"], env={"SCHEDSIM_LOCK_WAIT_S": "soon"})
        assert r.exit_code == 2 and "SCHEDSIM_LOCK_WAIT_S='soon' is not a number" in r.output
    finally:
        holder.kill()
        holder.wait()
    fd = os.open(d, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by the refused runs too
    finally:
        os.close(fd)


def test_library_writers_refuse_special_files_too(tmp_path: Path) -> None:
    # write_csv truncated whatever it was given (open(path, "w")): a FIFO blocked, a device was written to
    from schedsim.errors import SchedsimError
    from schedsim.pipeline import write_csv

    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    with pytest.raises(SchedsimError, match="is a FIFO"):
        write_csv({0: [None]}, fifo)
    write_csv({0: [None], 1: [None]}, tmp_path / "ok.csv")
    assert (tmp_path / "ok.csv").read_bytes() == b"\"\"\r\n\"\"\r\n"  # csv: an empty cell per idle step


def test_a_run_killed_between_two_moves_leaves_files_the_next_run_knows(tmp_path: Path) -> None:
    # the moves of a set are atomic one file at a time: a SIGKILL between two of them leaves a new timeline.json
    # beside the old trace.json. The manifest was written first with both hashes of each name, so the next run
    # takes both for its own (before: a file of the new content, unrecorded, refused the folder)
    from schedsim.outdir import Manifest, file_digest

    d = tmp_path / "p"
    assert run(["predict", str(SCHED), "--out", str(d), "--no-gantt"]).exit_code == 0
    new = tmp_path / "new.json"
    new.write_text('{"format": "schedsim.timeline", "killed": "mid-set"}')
    m = Manifest.read(d)
    m.moving(d, "predict", {"timeline.json": file_digest(new), "trace.json": "0" * 64})
    os.replace(new, d / "timeline.json")  # the first move, then the kill
    r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"])
    assert r.exit_code == 0, r.output
    assert json.loads((d / "timeline.json").read_text())["format"] == "schedsim.timeline"
    assert all(isinstance(h, str) for h in json.loads((d / MANIFEST).read_text())["sets"]["predict"].values())


def test_file_digest_reads_a_settled_file_once_and_a_fresh_one_every_time(tmp_path, monkeypatch):
    import builtins

    from schedsim import outdir

    p = tmp_path / "timeline.json"
    p.write_bytes(b"a" * 1000)
    # just written: within the kernel clock's tick a same-size write may keep the times, so it is read again
    assert outdir.file_digest(p) == hashlib.sha256(b"a" * 1000).hexdigest()
    p.write_bytes(b"b" * 1000)
    assert outdir.file_digest(p) == hashlib.sha256(b"b" * 1000).hexdigest()
    # settled (no wait in a test: the settling time set to 0): the second call does not open the file
    monkeypatch.setattr(outdir, "_SETTLED_S", 0.0)
    assert outdir.file_digest(p) == hashlib.sha256(b"b" * 1000).hexdigest()
    real_open = builtins.open

    def no_read(f, *a, **k):  # type: ignore[no-untyped-def]
        if str(f) == str(p):
            raise AssertionError("read again")
        return real_open(f, *a, **k)

    monkeypatch.setattr(builtins, "open", no_read)
    assert outdir.file_digest(p) == hashlib.sha256(b"b" * 1000).hexdigest()
    monkeypatch.setattr(builtins, "open", real_open)
    # changed (its size and times): read again
    p.write_bytes(b"c" * 999)
    assert outdir.file_digest(p) == hashlib.sha256(b"c" * 999).hexdigest()


def test_file_digest_of_a_staged_timeline_is_that_of_the_bytes_written_not_read_back(tmp_path, monkeypatch):
    import builtins

    from schedsim import outdir
    from schedsim.sim.timeline import Span, Timeline

    tl = Timeline("x", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 4e-6)])
    with outdir.output_set(tmp_path / "out", "predict") as stage:
        p = stage / "timeline.json"
        tl.write_json(p)
        want = hashlib.sha256(p.read_bytes()).hexdigest()
        real_open = builtins.open

        def no_read(f, *a, **k):  # type: ignore[no-untyped-def]
            if str(f) == str(p):
                raise AssertionError("read back")
            return real_open(f, *a, **k)

        monkeypatch.setattr(builtins, "open", no_read)
        assert outdir.file_digest(p) == want  # just written (not settled), yet not read: hashed as written
        monkeypatch.setattr(builtins, "open", real_open)
        p.write_bytes(b"{}")  # another write: its identity changed, so the file is read
        assert outdir.file_digest(p) == hashlib.sha256(b"{}").hexdigest()
        tl.write_json(p)
    # the manifest records the digest of the bytes in place
    got = json.loads((tmp_path / "out" / outdir.MANIFEST).read_text())["sets"]["predict"]["timeline.json"]
    assert got == hashlib.sha256((tmp_path / "out" / "timeline.json").read_bytes()).hexdigest() == want


def _no_digest_of(monkeypatch: pytest.MonkeyPatch, d: Path) -> list[str]:
    """Make :func:`schedsim.outdir.file_digest` record (and still compute) each file of ``d`` it hashes."""
    from schedsim import outdir

    read: list[str] = []
    real = outdir.file_digest

    def spy(p: Path) -> str:
        if Path(p).parent == d:
            read.append(Path(p).name)
        return real(p)

    monkeypatch.setattr(outdir, "file_digest", spy)
    return read


def test_a_rerun_takes_its_unchanged_files_by_identity_without_hashing_them(tmp_path, monkeypatch):
    # the manifest records each moved-in file's (dev, ino, size, mtime_ns, ctime_ns) beside its hash: a re-run
    # whose earlier files still have those identities replaces them without reading them (a 1M-op timeline.json
    # is 100 MB: 0.09 CPU s of SHA-256)
    from schedsim.io import file_identity

    d = tmp_path / "p"
    assert run(["predict", str(SCHED), "--out", str(d), "--no-gantt"]).exit_code == 0
    doc = json.loads((d / MANIFEST).read_text())
    ids = doc["identities"]["predict"]
    assert set(ids) == set(doc["sets"]["predict"]) == {"timeline.json", "trace.json"}
    for name, rec in ids.items():
        assert rec == [doc["sets"]["predict"][name], *file_identity(os.lstat(d / name))]
        assert rec[0] == hashlib.sha256((d / name).read_bytes()).hexdigest()
    read = _no_digest_of(monkeypatch, d)
    r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"])
    assert r.exit_code == 0, r.output
    assert read == []


def test_a_file_edited_in_place_with_its_size_and_mtime_restored_is_refused(tmp_path, monkeypatch):
    # os.utime puts the modification time back, but the change time moves to now: the identity differs, the
    # file is hashed, and its content is not what predict wrote
    d = tmp_path / "p"
    assert run(["predict", str(SCHED), "--out", str(d), "--no-gantt"]).exit_code == 0
    p = d / "timeline.json"
    st = p.stat()
    time.sleep(0.02)  # past the tick of the kernel's file clock that the move's change time fell in
    data = bytearray(p.read_bytes())
    data[-3:-2] = b" " if data[-3:-2] != b" " else b"\t"
    with open(p, "r+b") as f:
        f.write(bytes(data))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (p.stat().st_size, p.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    read = _no_digest_of(monkeypatch, d)
    r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"])
    assert r.exit_code == 2
    assert "timeline.json: exists and schedsim did not record writing it (or it changed since)" in r.output
    assert "timeline.json" in read
    assert p.read_bytes() == bytes(data)


def test_a_copied_folder_falls_back_to_hashing_and_is_still_its_own(tmp_path, monkeypatch):
    # a copy's files are other inodes: their identities do not match the manifest's, so they are hashed, and
    # their content is what was recorded: the re-run replaces them and records the new identities
    import shutil

    src = tmp_path / "p"
    assert run(["predict", str(SCHED), "--out", str(src), "--no-gantt"]).exit_code == 0
    d = tmp_path / "copy"
    shutil.copytree(src, d)
    read = _no_digest_of(monkeypatch, d)
    r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"])
    assert r.exit_code == 0, r.output
    assert set(read) == {"timeline.json", "trace.json"}
    from schedsim.io import file_identity

    ids = json.loads((d / MANIFEST).read_text())["identities"]["predict"]
    assert ids["timeline.json"][1:] == list(file_identity(os.lstat(d / "timeline.json")))


def test_an_identity_record_is_taken_only_with_a_hash_of_its_set(tmp_path):
    # a record's hash must be one the set lists for that name; a malformed record is dropped on reading
    from schedsim.io import file_identity
    from schedsim.outdir import Manifest

    p = tmp_path / "a.json"
    p.write_bytes(b"{}")
    ident = list(file_identity(os.lstat(p)))
    good = hashlib.sha256(b"{}").hexdigest()
    other = "1" * 64
    m = Manifest({"predict": {"a.json": other}}, {"predict": {"a.json": [other, *ident]}})
    assert m.holds(tmp_path, "predict", "a.json")  # the identity stands for the recorded content
    m = Manifest({"predict": {"a.json": other}}, {"predict": {"a.json": ["2" * 64, *ident]}})
    assert not m.holds(tmp_path, "predict", "a.json")  # a hash the set does not list: hashed, and not it
    m = Manifest({"predict": {"a.json": good}}, {})
    assert m.holds(tmp_path, "predict", "a.json")
    doc = {"format": "schedsim.outputs", "version": 2, "sets": {"predict": {"a.json": good}},
           "identities": {"predict": {"a.json": [good, *ident[:4]]}, "sweep": {"a.json": [good, *ident]}}}
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    assert Manifest.read(tmp_path).identities == {"predict": {}}


def test_an_identity_recorded_in_the_manifests_own_clock_tick_is_not_trusted(tmp_path):
    # on a coarse-clock file system (1 s: ext4 with 128-byte inodes; 2 s: FAT) a same-size write in the tick of
    # the move leaves the identity as recorded; the manifest written in that tick has that modification time
    from schedsim.io import file_identity
    from schedsim.outdir import Manifest

    p = tmp_path / "a.json"
    p.write_bytes(b"{}")
    ident = list(file_identity(os.lstat(p)))
    other = "1" * 64  # a hash this content does not have: only the identity can make it schedsim's
    doc = {"format": "schedsim.outputs", "version": 2, "sets": {"predict": {"a.json": other}},
           "identities": {"predict": {"a.json": [other, *ident]}}}
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    ctime = ident[4]
    os.utime(tmp_path / MANIFEST, ns=(ctime, ctime))  # written in the record's tick
    m = Manifest.read(tmp_path)
    assert m.identities == {"predict": {}} and not m.holds(tmp_path, "predict", "a.json")
    os.utime(tmp_path / MANIFEST, ns=(ctime, ctime + 1))  # written after the record's tick ended
    m = Manifest.read(tmp_path)
    assert m.identities == {"predict": {"a.json": [other, *ident]}} and m.holds(tmp_path, "predict", "a.json")


def test_a_same_size_edit_in_the_runs_clock_tick_is_refused(tmp_path):
    # the folder as a 1-second file system leaves it when the user edits timeline.json in place in the second
    # predict moved it in: the manifest's record is the edited file's identity, and the manifest's modification
    # time is that second
    from schedsim.io import file_identity

    d = tmp_path / "p"
    assert run(["predict", str(SCHED), "--out", str(d), "--no-gantt"]).exit_code == 0
    p = d / "timeline.json"
    data = bytearray(p.read_bytes())
    data[-3:-2] = b" " if data[-3:-2] != b" " else b"\t"
    with open(p, "r+b") as f:
        f.write(bytes(data))
    doc = json.loads((d / MANIFEST).read_text())
    ident = file_identity(os.lstat(p))
    doc["identities"]["predict"]["timeline.json"][1:] = list(ident)
    (d / MANIFEST).write_text(json.dumps(doc))
    os.utime(d / MANIFEST, ns=(ident[4], ident[4]))
    r = run(["predict", str(SCHED), "--out", str(d), "--no-gantt"])
    assert r.exit_code == 2, r.output
    assert "timeline.json: exists and schedsim did not record writing it (or it changed since)" in r.output
    assert p.read_bytes() == bytes(data)


def test_identities_of_a_manifest_another_user_owns_are_not_taken(tmp_path, monkeypatch):
    # an identity needs only lstat (no read permission): one planted in a shared folder by another user could
    # name a file of ours they cannot read; its files are hashed instead
    from schedsim.io import file_identity
    from schedsim.outdir import Manifest

    p = tmp_path / "a.json"
    p.write_bytes(b"{}")
    ident = list(file_identity(os.lstat(p)))
    other = "1" * 64  # not this content's hash: only the identity could make it schedsim's
    doc = {"format": "schedsim.outputs", "version": 2, "sets": {"predict": {"a.json": other}},
           "identities": {"predict": {"a.json": [other, *ident]}}}
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    os.utime(tmp_path / MANIFEST, ns=(ident[4], ident[4] + 1))
    owner = os.lstat(tmp_path / MANIFEST).st_uid
    assert Manifest.read(tmp_path).holds(tmp_path, "predict", "a.json")
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    m = Manifest.read(tmp_path)
    assert m.identities == {} and not m.holds(tmp_path, "predict", "a.json")
    assert m.sets == {"predict": {"a.json": other}}
