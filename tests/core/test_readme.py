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
