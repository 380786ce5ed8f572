"""Pipeline-parallel schedules: generate, lower, validate, time and (de)serialise.

Pure Python; never imports torch (its tests compare against torch).

Modules
-------
actions
    ``Action`` / ``OverlapAction`` in PyTorch's text notation (``2F0``).
schedules
    Registry of the generators and stage placement.
schedules_1f1b, schedules_zb, schedules_dualpipe
    Generators, one family per module: gpipe, 1f1b, interleaved_1f1b, looped_bfs;
    zb_h1, interleaved_zb, zbv; dualpipev. Their argument checks are in schedules_common.
comms
    p2p lowering (SEND/RECV) and a lock-step deadlock dry run.
validate
    All checks at once; failures print the rank x step grid.
csv_io
    PyTorch's pipeline CSV and inline action lists.
analytic
    Closed-form bubbles and memory, and a unit-time simulator.

Errors (``PipelineScheduleError`` and its subclasses) and the grid formatter live in
:mod:`schedsim.errors`, the one error tree; they are re-exported here.
"""

from schedsim.errors import (
    DeadlockError,
    InsufficientMicrobatchesError,
    PipelineScheduleError,
    ScheduleConfigError,
    format_pipeline_order,
)
from schedsim.pipeline.actions import (
    Action,
    ComputationType,
    OverlapAction,
    PipelineOrder,
    ScheduleAction,
    parse_action,
)
from schedsim.pipeline.analytic import (
    UnitTimeResult,
    bubble_fraction_of_ideal,
    bubble_fraction_of_makespan,
    dualpipe_bubble_time,
    one_f_one_b_bubble_time,
    peak_activation_memory,
    unit_time_closed_form,
    unit_time_makespan,
    zb_h1_bubble_time,
    zb_h2_bubble_time,
)
from schedsim.pipeline.comms import add_p2p, compute_only, infer_stage_to_rank, simulate_p2p
from schedsim.pipeline.csv_io import (
    dumps_csv,
    format_order,
    loads_csv,
    parse_order,
    read_csv,
    write_csv,
)
from schedsim.pipeline.schedules import (
    ScheduleInfo,
    generate,
    get_schedule,
    min_microbatches,
    schedule_names,
    stage_to_rank,
)
from schedsim.pipeline.schedules_1f1b import (
    gpipe,
    interleaved_1f1b,
    looped_bfs,
    megatron_schedule_table,
    one_f_one_b,
    torch_group_size,
)
from schedsim.pipeline.schedules_dualpipe import dualpipev
from schedsim.pipeline.schedules_zb import interleaved_zero_bubble, zb_h1, zbv
from schedsim.pipeline.validate import validate

__all__ = [
    "Action",
    "ComputationType",
    "DeadlockError",
    "InsufficientMicrobatchesError",
    "OverlapAction",
    "PipelineOrder",
    "PipelineScheduleError",
    "ScheduleAction",
    "ScheduleConfigError",
    "ScheduleInfo",
    "UnitTimeResult",
    "add_p2p",
    "bubble_fraction_of_ideal",
    "bubble_fraction_of_makespan",
    "compute_only",
    "dualpipe_bubble_time",
    "dualpipev",
    "dumps_csv",
    "format_order",
    "format_pipeline_order",
    "generate",
    "get_schedule",
    "gpipe",
    "infer_stage_to_rank",
    "interleaved_1f1b",
    "interleaved_zero_bubble",
    "loads_csv",
    "looped_bfs",
    "megatron_schedule_table",
    "min_microbatches",
    "one_f_one_b",
    "one_f_one_b_bubble_time",
    "parse_action",
    "parse_order",
    "peak_activation_memory",
    "read_csv",
    "schedule_names",
    "simulate_p2p",
    "stage_to_rank",
    "torch_group_size",
    "unit_time_closed_form",
    "unit_time_makespan",
    "validate",
    "write_csv",
    "zb_h1",
    "zb_h1_bubble_time",
    "zb_h2_bubble_time",
    "zbv",
]
