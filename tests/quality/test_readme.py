"""README.md opens with the two commands, and .ci/run runs exactly the test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    cmds, inside = [], False
    for ln in lines:
        if ln.startswith("```"):
            inside = not inside
            continue
        if inside and ln.strip():
            cmds.append(ln.strip())
        if len(cmds) == 2:
            break
    return cmds


def test_readme_opens_with_setup_and_test_commands():
    setup, test = _commands()
    assert "schedsim predict schedules/allgather_mm8.yaml" in setup
    assert "torch==2.13.0" in test and "pytest" in test


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci/run").read_text().splitlines()
    assert _commands()[1] in [ln.strip() for ln in ci]


def test_every_benchmark_script_the_docs_name_exists():
    """Every ``benchmarks/....py|sh|md`` path the docs tell a reader to run or read is in the tree, unless the text
    says which commit holds it (``at c85fbcf``, and validation.md's evidence table, whose write-ups are at that
    commit). The benchmarks
    move to speed/, accuracy/ and probes/ left validation.md naming benchmarks/replay.py, accuracy_replay.py,
    replay.md and probe_profiler_host.py."""
    import re

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "benchmarks").rglob("*.md"))]
    missing = []
    for doc in docs:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            if line.startswith("## Evidence cited by the code"):
                break  # the table of retired write-ups, read with git show c85fbcf:PATH
            if "c85fbcf" in line:
                continue
            for path in re.findall(r"benchmarks/[\w./-]+\.(?:py|sh|md)\b", line):
                if not (ROOT / path).exists():
                    missing.append(f"{doc.relative_to(ROOT)}:{n}: {path}")
    assert not missing, "\n".join(missing)


def test_every_shipped_profile_is_in_the_readme_and_guide_tables():
    """README.md's "Hardware profiles" table and docs/guide.md's name every profile that ``schedsim profiles``
    lists (``h200_calibrated`` shipped without a row in either)."""
    import re

    from schedsim.hardware.profile import list_profiles

    for doc in (ROOT / "README.md", ROOT / "docs" / "guide.md"):
        text = doc.read_text()
        section = text[text.index("## Hardware profiles"):]
        section = section[:section.index("\n## ", 1)]
        rows = {n for line in section.splitlines() if line.startswith("| `")
                for n in re.findall(r"`([\w.-]+)`", line.split("|")[1])}
        assert set(list_profiles()) <= rows, f"{doc.name}: no row for {sorted(set(list_profiles()) - rows)}"
