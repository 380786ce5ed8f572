"""Help at 80 columns (issue 33): every command's --help holds every option's help text whole (rich markup had
deleted "[default: ...]" from it, and its tables cut words with "…"), no line is wider than the terminal, and
``schedsim profiles`` wraps descriptions instead of cutting them mid-word."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from schedsim.cli import app


def _commands() -> list[tuple[str, Any]]:
    import typer

    group = typer.main.get_command(app)
    ctx = group.make_context("schedsim", ["--help"], resilient_parsing=True)
    return [(n, group.get_command(ctx, n)) for n in group.list_commands(ctx)]


COMMANDS = [n for n, _c in _commands()]


def _help(*args: str) -> str:
    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert r.exit_code == 0, r.output
    return r.stdout


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("name", COMMANDS)
def test_every_options_help_is_printed_whole_within_80_columns(name: str) -> None:
    out = _help(name)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    cmd = dict(_commands())[name]
    flat = _flat(out)
    for p in cmd.params:
        text = getattr(p, "help", None)
        if text:
            assert _flat(text) in flat, (name, p.name, text)


def test_bracketed_defaults_survive() -> None:
    """The issue's two cases: --max-ops's "[default: 2,000,000; ...]" and compare's "[default: schedsim_out/...]"."""
    assert "summed over ranks [default: 2,000,000; env SCHEDSIM_MAX_OPS]." in _flat(_help("predict"))
    assert "Output folder [default: schedsim_out/compare_<schedule>]." in _flat(_help("compare"))


def test_the_command_list_gives_each_first_sentence_whole() -> None:
    flat = _flat(_help())
    for name, cmd in _commands():
        assert f"{name} {_flat(cmd.get_short_help_str(limit=10_000))}" in flat
    assert "..." not in flat.split("Commands:")[1]


def test_profiles_wrap_descriptions_whole() -> None:
    from schedsim.hardware.profile import list_profiles, load_profile

    r = CliRunner().invoke(app, ["profiles"], env={"COLUMNS": "80"})
    assert r.exit_code == 0
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    flat = _flat(r.stdout)
    for name in list_profiles():
        assert _flat(load_profile(name).description) in flat
