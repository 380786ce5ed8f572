"""Reports of a timeline.

* :mod:`~schedsim.report.summary` — terminal tables (totals, worst/best ranks, critical path);
* :mod:`~schedsim.report.gantt` — the Gantt chart (lanes per rank × stream);
* :mod:`~schedsim.report.pipeline_chart` — the pipeline chart (unit steps or time);
* :mod:`~schedsim.report.memory_chart` — the memory chart;
* :mod:`~schedsim.report.chart_base` — what the charts share: colours, labels, boxes, writing a figure;
* :mod:`~schedsim.report.charts` — the chart set of a run and the sweep chart;
* :mod:`~schedsim.report.chrome` — the Chrome/Perfetto trace (slices, flows, counters);
* :mod:`~schedsim.report.trace_check` — a strict checker of that trace format;
* :mod:`~schedsim.report.memory` — memory over time per rank;
* :mod:`~schedsim.report.progress` — progress bars and spinners on a terminal.
"""
