"""The ``execute`` and ``calibrate`` commands, registered on :mod:`schedsim.cli`'s app.

This module imports no torch at module level: ``schedsim predict`` imports it
(through ``register``) and must never import torch. Torch is imported inside
the commands, and ``calibrate --from-nccl-tests`` needs none.
"""

# no "from __future__ import annotations": typer evaluates the command signatures

from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(app: Any) -> None:
    """Add ``execute`` and ``calibrate`` to the typer ``app``."""
    import typer

    from schedsim.cliutil import DEFAULT_PROFILE, handle_errors

    @app.command()
    @handle_errors
    def execute(
        ctx: typer.Context,
        file: Path = typer.Argument(..., help="Schedule YAML (the same file predict takes)."),
        set_: list[str] | None = typer.Option(None, "--set", help="Override a schedule parameter (repeatable)."),
        out: Path | None = typer.Option(None, "--out", "-o",
                                           help="Output folder.", show_default="schedsim_out/<name>_execute"),
        iters: int = typer.Option(20, "--iters", min=1, help="Timed iterations; the median is kept per op."),
        warmup: int = typer.Option(5, "--warmup", min=0, help="Untimed warm-up iterations."),
        lean_iters: int = typer.Option(-1, "--lean-iters", show_default="-1, i.e. as many as --iters",
                                       help="Uninstrumented iterations, each timed as a whole (no per-op events): "
                                       "their median is makespan_uninstrumented_s. -1 runs as many as --iters; "
                                       "0 skips them."),
        host_call_iters: int = typer.Option(5, "--host-call-iters", min=0,
                                            help="Uninstrumented eager CUDA iterations, after the others, that "
                                            "read the host clock after each op's call (meta.host_call_end_s: "
                                            "where the host's issue time goes, op by op). 0 skips them."),
        timeout: float = typer.Option(300.0, "--timeout", min=0.1,
                                      help="Seconds an op may take from its issue before the run fails, naming it."),
        check: bool = typer.Option(False, "--check",
                                   help="Run on real data and verify against the unchunked reference."),
        profiler: bool = typer.Option(False, "--profiler", help="Two more iterations under torch.profiler; Kineto "
                                      "trace per rank and kernel times mapped to ops."),
        cuda_graph: bool | None = typer.Option(None, "--cuda-graph/--eager",
                                                  help="Capture the iteration in a CUDA graph and replay it.",
                                                  show_default="the schedule's launch"),
        compare: bool = typer.Option(False, "--compare", help="Also predict with --profile and compare."),
        profile: str = typer.Option(DEFAULT_PROFILE, "--profile", "-p", help="Profile for --compare."),
        measure_host: bool = typer.Option(
            False, "--measure-host",
            help="After the timed iterations, measure plain PyTorch's host cost per call by kind in this process "
                 "(as calibrate does; meta.host_costs_us), and with --compare predict with them in place of the "
                 "profile's: a process's host speed varies between processes, which host-bound schedules show."),
        backend: str = typer.Option("auto", "--backend", help="auto | nccl | gloo."),
        device: str = typer.Option("auto", "--device", help="auto | cuda | cpu."),
        gantt: bool = typer.Option(True, "--gantt/--no-gantt", help="Draw Gantt charts."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random input data."),
        nvtx: bool = typer.Option(True, "--nvtx/--no-nvtx", help="NVTX range per op (CUDA)."),
        max_connections: int | None = typer.Option(None, "--max-connections",
                                                      help="Set CUDA_DEVICE_MAX_CONNECTIONS (hardware work queues, "
                                                      "1-32) before CUDA starts; 1 = kernels start in issue order, "
                                                      "as under Megatron. Recorded in the timeline's meta.",
                                                      show_default="the environment's, else CUDA's 8"),
        nproc_per_node: int | None = typer.Option(None, "--nproc-per-node", min=1, max=1024,
                                                     help="Start this many ranks on this machine (through torch's "
                                                     "launcher, as torchrun does) after checking the input here: "
                                                     "bad input exits 2 before any rank starts. Without it, run "
                                                     "under torchrun (several nodes) or as one rank."),
    ) -> None:
        """Run a schedule for real: NCCL streams on GPUs, gloo on CPUs; write the measured timeline.

        Start it with ``schedsim execute --nproc-per-node N FILE`` (one machine), or ``torchrun ... -m schedsim
        execute FILE`` (several machines)."""
        from executor.execute import run_execute
        from executor.runtime import RunOptions

        if backend not in ("auto", "nccl", "gloo") or device not in ("auto", "cuda", "cpu"):
            from executor import ExecError

            raise ExecError(f"--backend {backend} --device {device}: use auto|nccl|gloo and auto|cuda|cpu")
        opts = RunOptions(iters=iters, warmup=warmup, lean_iters=lean_iters, timeout_s=timeout, check=check,
                          profiler=profiler, nvtx=nvtx, seed=seed, measure_host=measure_host,
                          host_call_iters=host_call_iters)
        if nproc_per_node is not None:
            from executor.execute import _precheck
            from executor.launch import launch_ranks, rank_argv

            def precheck(world: int) -> None:
                _precheck(file, set_ or [], opts, compare=compare, profile=profile, device=device,
                          cuda_graph=cuda_graph, rank=0, world=world, out=out, parent=True)

            launch_ranks(nproc_per_node, rank_argv(ctx), file=file, backend=backend, device=device, check=precheck)
            return
        run_execute(file, set_ or [], out, opts, compare=compare, profile=profile, backend=backend, device=device,
                    gantt=gantt, cuda_graph=cuda_graph, max_connections=max_connections)

    @app.command()
    @handle_errors
    def calibrate(
        schedules: list[Path] | None = typer.Argument(None, help="Schedules whose GEMM shapes to measure "
                                                         "(besides the default grid)."),
        set_: list[str] | None = typer.Option(None, "--set", help="Parameter overrides for those schedules."),
        out: Path = typer.Option(Path("calibrated.yaml"), "--out", "-o", help="Profile YAML to write."),
        name: str | None = typer.Option(None, "--name", help="Profile name.", show_default="the --out file stem"),
        base: str = typer.Option(DEFAULT_PROFILE, "--base",
                                 help="Profile supplying what is not measured (peaks, links, topology)."),
        from_nccl_tests: list[Path] | None = typer.Option(None, "--from-nccl-tests",
                                                             help="Build collective tables from nccl-tests logs "
                                                             "(no torch, no GPU needed)."),
        transport_latency: bool = typer.Option(False, "--transport-latency",
                                               help="With --from-nccl-tests: fit topology.nics.transport_latency_us "
                                               "(the network's latency per crossing that NCCL does not see) to the "
                                               "rows across nodes up to 4 KiB, before the NICs' tier figures."),
        collective: str | None = typer.Option(None, "--collective", help="Collective of a log that does not say."),
        ranks: int | None = typer.Option(None, "--ranks", help="Group size of a log that does not say."),
        dtypes: str = typer.Option("fp32,tf32,bf16,fp16", "--dtypes", help="GEMM dtypes (comma-separated)."),
        gemm: list[str] = typer.Option([], "--gemm", help="Extra GEMM shape MxNxK (repeatable)."),
        grid: bool = typer.Option(True, "--grid/--no-grid", help="Measure the default GEMM grid too."),
        max_bytes: float = typer.Option(2**30, "--max-bytes", help="Largest collective size of the sweep (B)."),
        min_bytes: float = typer.Option(1024, "--min-bytes", help="Smallest collective size of the sweep (B)."),
        factor: int = typer.Option(4, "--factor", min=2, help="Size step of the sweep."),
        iters: int = typer.Option(20, "--iters", min=1, help="Timed repetitions per point (median kept)."),
        quick: bool = typer.Option(False, "--quick", help="Small grid and sweep (CI, smoke tests)."),
        backend: str = typer.Option("auto", "--backend", help="auto | nccl | gloo."),
        device: str = typer.Option("auto", "--device", help="auto | cuda | cpu."),
        host_processes: int | None = typer.Option(
            None, "--host-processes", min=0, max=8,
            help="Fresh processes (0-8, up to 60 s each while the other ranks wait) that measure the host cost per "
                 "call by kind; the profile keeps their median (a process's host speed varies from process to "
                 "process).", show_default="3 on CUDA, 0 on CPU"),
    ) -> None:
        """Measure a hardware profile (under torchrun): GEMMs, collectives, p2p, copies, launch overhead, contention."""
        from executor.calibrate_logs import default_profile_name

        default_profile_name(name, out)  # before any measurement: the name ends up in the profile's header
        from schedsim.io import claim_file, output_target, refuse_input

        target = output_target(out, "--out")  # a device or folder is refused before anything is measured
        if not from_nccl_tests and isinstance(target, Path) and out.suffix == ".json":
            from schedsim.errors import SchedsimError

            # run_calibrate writes the raw measurements to --out with the suffix .json: here the profile itself
            raise SchedsimError(f"{out}: --out is the profile YAML, and calibrate writes its raw measurements beside "
                                "it under the same name with the suffix .json: the profile would be replaced",
                                fix=f"name it {out.with_suffix('.yaml')}")
        based = [base] if Path(base).suffix else []  # a profile file, not a shipped profile's name
        refuse_input(out, [*(from_nccl_tests or []), *(schedules or []), *based], "--out")
        claim_file(out, "profile", "--out")  # a file schedsim did not write is refused, also before measuring
        if not from_nccl_tests and isinstance(target, Path):  # the raw measurements' file beside it, likewise
            claim_file(out.with_suffix(".json"), "calibration", "--out's raw measurements")
        if from_nccl_tests:
            from executor.calibrate_logs import profile_from_nccl_tests

            # `--from-nccl-tests a.log b.log`: click gives b.log to the SCHEDULES argument; read every file named
            profile_from_nccl_tests(list(from_nccl_tests) + list(schedules or []), out=out, name=name, base=base,
                                    collective=collective, nranks=ranks, transport=transport_latency)
            return
        if transport_latency:
            from schedsim.errors import SchedsimError

            raise SchedsimError("--transport-latency fits a figure to nccl-tests logs, and no --from-nccl-tests log "
                                "was given", fix="pass --from-nccl-tests LOG... with it, or leave it out")
        from executor.calibrate import run_calibrate
        from executor.calibrate_bench import CalibrateOptions

        opts = CalibrateOptions(schedules=list(schedules or []), sets=list(set_ or []), out=out, name=name, base=base,
                                dtypes=[d.strip() for d in dtypes.split(",") if d.strip()], extra_gemms=list(gemm),
                                grid=grid, max_bytes=int(max_bytes), min_bytes=int(min_bytes), factor=factor,
                                iters=iters, quick=quick, backend=backend, device=device,
                                host_processes=host_processes)
        run_calibrate(opts)
