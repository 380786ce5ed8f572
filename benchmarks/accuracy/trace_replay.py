"""Replay error of imported traces (issue 37): import -> schedule.yaml -> ``replay`` model -> held against the trace.

    python benchmarks/accuracy/trace_replay.py [--layers N]

For each real trace in ``../shared/data/traces`` (next to the repository) and ``tests/data`` (among them
``--capture``'s training steps and CUDA graphs of one H100), and the synthetic
multi-stream and CUDA-graph traces of ``tests/trace/replaygen.py``, predicted as ``schedsim predict`` does
(``durations: recorded``): the trace's makespan (last GPU end − first GPU start), the replay's, the
error, and the median over ops of |replay start − recorded start| as a share of the makespan. The last
columns say what the schedule rests on: guessed dependencies, and how NCCL ops were handled (a real trace of
one rank of a multi-rank run keeps each collective's recorded duration with its peers absent, so their
timing is inside that duration). ``--layers N`` adds a synthetic trace of 3·N ops and times import, load and
replay.

``--capture DIR`` (on a GPU machine, with torch) records this table's own real traces into ``DIR`` instead,
each a Kineto JSON of ``torch.profiler`` (CPU and CUDA activities, ``record_shapes=True``), gzipped:

* ``kineto_train_step_<tag>.json.gz`` (``tests/data/kineto_train_step_{small,gpt4l}_h100.json.gz``): training
  steps of a small GPT-style decoder in plain PyTorch (token + position embedding, pre-LN blocks of causal
  ``scaled_dot_product_attention`` and a GELU MLP, cross-entropy loss), bf16 weights, ``torch.optim.AdamW`` (its
  default multi-tensor ``foreach`` kernels), two profiled steps after warm-up; sizes in ``TRAIN_SIZES`` (under
  the profiler both ran host-bound for most of the step on one H100);
* ``kineto_cuda_graph_<tag>.json.gz`` (``tests/data/kineto_cuda_graph{,_2streams}_h100.json.gz``): a
  ``torch.cuda.CUDAGraph`` of MLP blocks (``graph``: one stream; ``graph2s``: a second captured stream forks and
  joins), replayed three times between eager ops.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TRACES = (REPO / ".." / "shared" / "data" / "traces").resolve()
#: A real Kineto trace shipped with the tests (one H200, ``schedsim execute`` of an offload schedule).
SHIPPED = REPO / "tests" / "data" / "kineto_execute_offload_h200_rank0.json.gz"
#: Real Kineto traces of one H100 shipped with the tests (``--capture``, 2026-12-06).
H100 = [("kineto H100 GPT training step, 2 x 256 wide (host-bound)", "kineto_train_step_small_h100.json.gz"),
        ("kineto H100 GPT training step, 4 x 1024 wide", "kineto_train_step_gpt4l_h100.json.gz"),
        ("kineto H100 CUDA graph x3, one stream", "kineto_cuda_graph_h100.json.gz"),
        ("kineto H100 CUDA graph x3, two captured streams", "kineto_cuda_graph_2streams_h100.json.gz")]
sys.path.insert(0, str(REPO / "tests" / "trace"))


def _import(files: list[Path], kind: str) -> Any:
    if kind == "nsys":
        from schedsim.trace.nsys import import_nsys

        return import_nsys(files, keep_runtime=True, keep_kernel_rows=False)
    from schedsim.trace.kineto import import_kineto

    return import_kineto(files, keep_runtime=True, keep_kernel_rows=False)


def row(label: str, files: list[Path], kind: str) -> dict[str, Any]:
    """Import, write the schedule, replay it; the table row (and timings in s)."""
    from schedsim import api
    from schedsim.hardware.profile import load_profile
    from schedsim.trace.replay import replay_report
    from schedsim.trace.to_schedule import write_replay_schedule

    t0 = time.perf_counter()
    res = _import(files, kind)
    with tempfile.TemporaryDirectory() as d:
        got = write_replay_schedule(res.replay, Path(d) / "schedule.yaml", name=label)
        t1 = time.perf_counter()
        spec = api.load(Path(d) / "schedule.yaml")
        t2 = time.perf_counter()
        tl = api.simulate_spec(spec, load_profile("h200")).timeline  # durations: recorded: the replay model
        t3 = time.perf_counter()
    rep = replay_report(tl)
    return {"trace": label, "ops": got.n_ops, "waits": got.n_deps, "trace_ms": rep.trace_makespan_s * 1e3,
            "replay_ms": rep.replay_makespan_s * 1e3, "error": rep.error, "start_med": rep.start_error_median,
            "guessed": "; ".join(got.guesses) or "-", "notes": "; ".join(got.notes) or "-",
            "import_s": t1 - t0, "load_s": t2 - t1, "replay_s": t3 - t2}


#: ``--capture``'s GPT sizes: layers, model width, heads, sequence, batch, vocabulary.
TRAIN_SIZES = {"small": (2, 256, 4, 128, 4, 4096), "gpu": (4, 1024, 16, 512, 8, 8192)}


def _profiled(out: Path, name: str, step: Any, warm: int, active: int) -> None:  # pragma: no cover - GPU
    """Run ``step`` ``warm + active`` times under ``torch.profiler`` (the last ``active`` kept) into ``out/name``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    path = out / name
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=0, warmup=warm, active=active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(warm + active):
            step()
            prof.step()
    torch.cuda.synchronize()
    print(f"{name}: {path.stat().st_size / 1e6:.2f} MB")


def _capture_training(out: Path) -> None:  # pragma: no cover - needs a GPU
    """``--capture``'s training steps (module docstring), one trace per ``TRAIN_SIZES`` entry."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    dev = torch.device("cuda", 0)

    class Block(nn.Module):
        def __init__(self, d: int, h: int) -> None:
            super().__init__()
            self.h, self.ln1, self.ln2 = h, nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, n: int, d: int, h: int, t: int, vocab: int) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
            self.blocks = nn.Sequential(*[Block(d, h) for _ in range(n)])
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            return self.head(self.ln(self.blocks(x)))

    for tag, (n, d, h, t, b, vocab) in TRAIN_SIZES.items():
        model = GPT(n, d, h, t, vocab).to(dev, torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        idx = torch.randint(0, vocab, (b, t), device=dev)
        tgt = torch.randint(0, vocab, (b, t), device=dev)

        def train_step(model: nn.Module = model, opt: torch.optim.Optimizer = opt, idx: torch.Tensor = idx,
                       tgt: torch.Tensor = tgt, vocab: int = vocab) -> None:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(idx).view(-1, vocab).float(), tgt.view(-1))
            loss.backward()
            opt.step()

        for _ in range(3):
            train_step()
        torch.cuda.synchronize(dev)
        _profiled(out, f"kineto_train_step_{tag}.json.gz", train_step, 1, 2)
        del model, opt


def _capture_graphs(out: Path) -> None:  # pragma: no cover - needs a GPU
    """``--capture``'s CUDA-graph traces (module docstring)."""
    import torch
    from torch import nn

    dev = torch.device("cuda", 0)
    d, layers = 1024, 8
    mlp = [nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)).to(dev, torch.bfloat16)
           for _ in range(layers)]
    x = torch.randn(256, d, device=dev, dtype=torch.bfloat16)
    side = torch.cuda.Stream(dev)
    for tag, two in (("graph", False), ("graph2s", True)):
        def body(x: torch.Tensor = x, two: bool = two) -> torch.Tensor:
            y = x
            for i, m in enumerate(mlp):
                if two and i % 2:  # odd blocks on a second stream, beside the even block before them again
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        z = m(y)
                    y = mlp[i - 1](y)
                    torch.cuda.current_stream().wait_stream(side)
                    y = y + z
                else:
                    y = m(y)
            return y

        with torch.no_grad():
            warm = torch.cuda.Stream(dev)
            warm.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warm):
                for _ in range(3):
                    body()
            torch.cuda.current_stream().wait_stream(warm)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = body()
            torch.cuda.synchronize(dev)

            def graph_step(g: torch.cuda.CUDAGraph = g, y: torch.Tensor = y) -> None:
                for _ in range(3):
                    x.mul_(0.5)
                    g.replay()
                    y.sum()

            _profiled(out, f"kineto_cuda_graph_{tag}.json.gz", graph_step, 1, 1)


def capture(out: Path) -> None:  # pragma: no cover - needs a GPU
    """Record ``--capture``'s traces into ``out`` (module docstring); prints one line per trace."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    _capture_training(out)
    _capture_graphs(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=0, help="also a synthetic trace of 3*N ops, timed")
    ap.add_argument("--capture", type=Path, help="record the real training-step and CUDA-graph traces (GPU) here")
    args = ap.parse_args()
    if args.capture:
        capture(args.capture)
        return
    from replaygen import graph_doc, layers_doc, rank_doc, write

    rows = []
    real = [("kineto all_reduce, rank 0 of 2", "kineto_nccl_allreduce_rank0_of2.json.gz", "kineto"),
            ("kineto send/recv, rank 0 of 128", "kineto_sendrecv_rank0_of128.json.gz", "kineto"),
            ("nsys saxpy (sqlite)", "nsys_saxpy_mpi_perlmutter_rank0.sqlite", "nsys")]
    for label, name, kind in real:
        if (TRACES / name).exists():
            rows.append(row(label, [TRACES / name], kind))
        else:
            print(f"skipped {label}: {TRACES / name} not found", file=sys.stderr)
    rows.append(row("kineto H200 offload, 3 streams (tests/data)", [SHIPPED], "kineto"))
    for label, name in H100:
        rows.append(row(label, [REPO / "tests" / "data" / name], "kineto"))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        synth = [("synthetic 2 streams, event wait (1 rank)", [rank_doc(0)]),
                 ("synthetic, wait without cuda_sync rows", [rank_doc(0, cuda_sync=False)]),
                 ("synthetic + device sync, host-bound tail", [rank_doc(0, sync=True)]),
                 ("synthetic 2 ranks, matched all_reduce", [rank_doc(0), rank_doc(1, b_us=40, ar_start=1150,
                                                                                  ar_us=50)]),
                 ("synthetic 2 streams x 200 layers", [layers_doc(200)]),
                 ("synthetic CUDA-graph launch, 2 graph streams", [graph_doc()])]
        if args.layers:
            synth.append((f"synthetic 2 streams x {args.layers} layers", [layers_doc(args.layers)]))
        for label, docs in synth:
            files = [write(tmp / f"{abs(hash(label))}_{i}.json", doc) for i, doc in enumerate(docs)]
            rows.append(row(label, files, "kineto"))
    print("| trace | ops | waits | trace makespan | replay makespan | error | op start error median "
          "(share of makespan) | import / load / replay s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['trace']} | {r['ops']} | {r['waits']} | {r['trace_ms']:.3f} ms | {r['replay_ms']:.3f} ms | "
              f"{r['error']:+.4%} | {r['start_med']:.4%} | {r['import_s']:.1f} / {r['load_s']:.1f} / "
              f"{r['replay_s']:.1f} |")
    errs = [abs(r["error"]) for r in rows]
    print(f"\nmakespan error: median {statistics.median(errs):.4%}, worst {max(errs):.4%}; op start error "
          f"median of medians {statistics.median(r['start_med'] for r in rows):.4%}")
    print("\nWhat each schedule rests on:")
    for r in rows:
        print(f"- {r['trace']}: guessed: {r['guessed']}; notes: {r['notes']}")


if __name__ == "__main__":
    main()
