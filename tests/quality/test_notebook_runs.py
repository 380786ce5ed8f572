"""The shipped notebook runs as Jupyter runs it (issue 33): executed by a kernel from its own folder, as
``jupyter nbconvert --execute examples/api_tour.ipynb`` does, without errors, its three figures displayed as
images (not ``<Figure ...>`` text) without ``%matplotlib inline``. And ``api.plot_*`` figures carry a PNG rich
display of their own."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_notebook_executes_from_its_folder_and_shows_its_figures() -> None:
    import nbclient
    import nbformat

    nb = nbformat.read(ROOT / "examples" / "api_tour.ipynb", as_version=4)
    for c in nb.cells:  # run it fresh: the committed outputs must not count
        if c.cell_type == "code":
            c.outputs = []
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    shown = [c.source for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(shown) == 3 and all(s.startswith("api.plot_") for s in shown)
    assert "makespan" in "".join(o.get("text", "") for o in code[0].outputs)


def test_plot_figures_have_a_png_rich_display() -> None:
    from schedsim import api

    run = api.predict(api.load(ROOT / "schedules" / "pipeline_schedules.yaml", p=2, m=2))
    for fig in (api.plot_gantt(run), api.plot_pipeline(run), api.plot_memory(run)):
        png = fig._repr_png_()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
