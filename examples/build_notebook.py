"""Build and execute ``examples/api_tour.ipynb`` without Jupyter: each code cell runs in one namespace,
its printed output and its last expression (a matplotlib Figure becomes an inline PNG) are stored as
the cell's outputs (nbformat 4 JSON, written by hand so no Jupyter package is needed).

Run: python examples/build_notebook.py   (from the repository root; takes a few seconds)
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CELLS: list[tuple[str, str]] = [
    ("markdown", "# schedsim API tour\n\nLoad a pipeline schedule, predict it on the H200 profile, draw the "
                 "paper-style pipeline figure, the Gantt chart and memory over time, sweep the schedule and compare "
                 "two predictions. Built and executed by `examples/build_notebook.py`."),
    ("code", "from pathlib import Path\n"
             "from schedsim import api\n"
             "# this checkout's schedules/, whether Jupyter starts here (examples/) or at the repository root\n"
             "SCHEDULES = next(p / 'schedules' for p in [Path.cwd(), *Path.cwd().parents]\n"
             "                 if (p / 'schedules').is_dir())\n"
             "spec = api.load(SCHEDULES / 'pipeline_schedules.yaml', p=4, m=8, schedule='1f1b')\n"
             "run = api.predict(spec, profile='h200')\n"
             "print(f'makespan {run.makespan_s * 1e3:.3f} ms')\n"
             "print('bubble (idle fraction):', round(run.metrics.pipeline.bubble_of_makespan.overall, 4))\n"
             "print('peak memory:', run.metrics.memory_peak)"),
    ("code", "api.plot_pipeline(run)"),
    ("code", "api.plot_gantt(run, title='1F1B, p=4, m=8')"),
    ("code", "api.plot_memory(run)"),
    ("code", "rows = api.sweep(SCHEDULES / 'pipeline_schedules.yaml', p=[4], m=[8],\n"
             "                 schedule=['1f1b', 'interleaved_1f1b', 'zb_h1', 'zbv', 'dualpipev'])\n"
             "for r in rows:\n"
             "    print(f\"{r['setting']['schedule']:>17}: {r['makespan_s'] * 1e3:7.3f} ms  bubble {r['bubble_ratio']:.3f}\")"),
    ("code", "zbv = api.predict(api.load(SCHEDULES / 'pipeline_schedules.yaml', p=4, m=8, schedule='zbv'))\n"
             "res = api.compare(zbv, run.timeline)\n"
             "print('makespan error of zbv against 1f1b:', f\"{res.makespan.error * 100:+.1f}%\")"),
]


def _run_cell(src: str, ns: dict) -> list[dict]:
    out: list[dict] = []
    tree = ast.parse(src)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(tree, "<cell>", "exec"), ns)  # noqa: S102 - the notebook's own cells
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns) if last else None  # noqa: S307
    if buf.getvalue():
        out.append({"output_type": "stream", "name": "stdout", "text": buf.getvalue().splitlines(keepends=True)})
    if value is not None:
        if hasattr(value, "savefig"):
            png = io.BytesIO()
            value.savefig(png, format="png", dpi=72)
            data = {"image/png": base64.b64encode(png.getvalue()).decode(), "text/plain": [repr(value)]}
        else:
            data = {"text/plain": [repr(value)]}
        out.append({"output_type": "execute_result", "execution_count": None, "metadata": {}, "data": data})
    return out


def build(path: Path = HERE / "api_tour.ipynb") -> dict:
    """Execute the cells and write the notebook; returns it."""
    ns: dict = {}
    cells = []
    n = 0
    for kind, src in CELLS:
        if kind == "markdown":
            cells.append({"cell_type": "markdown", "metadata": {}, "source": src.splitlines(keepends=True)})
            continue
        n += 1
        outs = _run_cell(src, ns)
        for o in outs:
            if o["output_type"] == "execute_result":
                o["execution_count"] = n
        cells.append({"cell_type": "code", "execution_count": n, "metadata": {}, "outputs": outs,
                      "source": src.splitlines(keepends=True)})
    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                       "language_info": {"name": "python", "version": sys.version.split()[0]}}}
    for i, c in enumerate(nb["cells"]):
        c["id"] = f"cell-{i}"
    path.write_text(json.dumps(nb, indent=1) + "\n")
    return nb


if __name__ == "__main__":
    build()
