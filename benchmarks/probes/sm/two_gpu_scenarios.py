"""The 2×H200 concurrency probes of 2026-11-30 as schedules, predicted by both GPU models (issue 8).

Usage: python benchmarks/probes/sm/two_gpu_scenarios.py [--profile h200x2] [--only NAME]

Each probe of ``benchmarks/probes/sm/two_gpu_concurrency.py`` (plain PyTorch, measured on 2×H200 NV18,
torch 2.11.0+cu130,
NCCL 2.28.9; numbers in ``two_gpu_concurrency_h200.json`` next to this file, summary: [evidence: 2xh200-concurrency]
in docs/validation.md)
is written as a schedule and predicted with the ``waves`` model (the ``sharing`` model it was once compared with is
retired). Printed per kernel: measured
and predicted start and end (ms from the probe's start event), and per scenario the span with its error.

What "start" means: the probe times a kernel with CUDA events recorded on its stream just before and after it,
so a measured start is when the stream reached the kernel (its host call done and the stream's previous work
finished), not when its first CTA ran. The comparable prediction is the op's ready time (``Span.ready_s``), which
is what the ``start`` columns print. Ends are comparable as they are.

Inputs taken from the measurement (not predicted): the time the host issued the *first* op of each stream in
the ``streams`` and ``nccl_beside_gemm`` probes (``host_us`` = measured event time − the model's host time),
because the probe's own Python (event creation, timing records, ``torch.cuda._sleep``) runs between those calls
and is no part of a schedule. Later ops of a stream are predicted.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from schedsim.hardware.profile import HardwareProfile, load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text

DATA = Path(__file__).resolve().with_name("two_gpu_concurrency_h200.json")  # two_gpu_concurrency.py's output
MIB = 1 << 20


@dataclass
class Scenario:
    """A probe: schedule YAML, measured (start, end) ms per op name of rank 0, and how to read the span."""

    name: str
    yaml: str
    measured: dict[str, tuple[float, float]] = field(default_factory=dict)
    span_ms: float | None = None  # measured span when per-op times were not recorded
    per: int = 1  # the span is divided by this (per-call times)
    launch: str = "eager"
    conns: int | None = None
    pin: dict[str, float] = field(default_factory=dict)  # op -> measured host issue time (ms)


def _doc(name: str, world: int, ops: list[str], launch: str = "eager") -> str:
    return (f"schema_version: 1\nname: {name}\nworld_size: {world}\nlaunch: {launch}\nops:\n"
            + "".join(f"  - {{{o}}}\n" for o in ops))


def streams(d: dict, conns: int | None) -> list[Scenario]:
    """Two bf16 8192³ GEMMs on s0, s1, then a 1024³ GEMM and a 128 MiB add_ on s2; eight fp16 streams."""
    c = d["streams"]["concurrent"]
    ops = ["name: gemm8192_s0, kind: matmul, m: 8192, n: 8192, k: 8192, dtype: bf16, stream: s0",
           "name: gemm8192_s1, kind: matmul, m: 8192, n: 8192, k: 8192, dtype: bf16, stream: s1",
           "name: gemm1024_s2, kind: matmul, m: 1024, n: 1024, k: 1024, dtype: bf16, stream: s2",
           # v.add_(1.0) on 64 Mi bf16 elements: read + write 128 MiB each
           f"name: add128MiB_s2, kind: compute, bytes: {2 * 128 * MIB}, flops: {64 * MIB}, dtype: bf16, stream: s2"]
    tag = "" if conns is None else f" conn={conns}"
    out = [Scenario("two 8192^3 GEMMs + small GEMM, add_" + tag, _doc("streams", 1, ops),
                    {k: tuple(v) for k, v in c.items()}, conns=conns,
                    pin={f"gemm8192_s{i}": c[f"gemm8192_s{i}"][0] for i in range(2)} | {"gemm1024_s2": c["gemm1024_s2"][0]})]
    e = d["streams"]["eight_streams_fp16_2048x1024x8192"]
    ops = []
    for i in range(8):
        ops.append(f"name: mm{i}, kind: matmul, m: 2048, n: 1024, k: 8192, dtype: fp16, stream: s{i}")
        # acc.add_(out): read two 2048×1024 fp16 tensors, write one
        ops.append(f"name: add{i}, kind: compute, bytes: {3 * 2048 * 1024 * 2}, flops: {2048 * 1024}, dtype: fp16, "
                   f"stream: s{i}")
    out.append(Scenario("8 streams fp16 2048x1024x8192 + add_" + tag, _doc("eight", 1, ops),
                        {k: tuple(v) for k, v in e.items()}, conns=conns,
                        pin={f"mm{i}": e[f"mm{i}"][0] for i in range(8)}))
    return out


def nccl_beside(d: dict) -> list[Scenario]:
    """A collective issued 0.2-0.3 ms after four bf16 8192³ GEMMs on another stream, on both ranks."""
    out = []
    for key, r in d["nccl_beside_gemm"].items():
        kind, nbytes = key.split()
        n = int(nbytes)
        size = f"bytes: {n}, buffer: shard" if kind == "all_gather" else f"bytes: {n}"
        ops = [f"name: g{j}, kind: matmul, m: 8192, n: 8192, k: 8192, dtype: bf16, stream: gs" for j in range(4)]
        ops.append(f"name: coll, kind: {kind}, {size}, dtype: bf16, stream: cs")
        t0 = r["comm_start_ms"]
        out.append(Scenario(f"{kind} {n // MIB} MiB beside 4 GEMMs", _doc("beside", 2, ops),
                            {"coll": (t0, t0 + r["beside_gemm_ms"]), "g3": (float("nan"), r["gemm4_beside_ms"])},
                            pin={"coll": t0}))
        out.append(Scenario(f"{kind} {n // MIB} MiB alone", _doc("alone", 2, ops[-1:]), span_ms=r["alone_ms"]))
    return out


def tiny200(d: dict) -> list[Scenario]:
    """200 bf16 64³ GEMMs on one stream: eager (host-bound) and one graph replay."""
    ops = [f"name: t{i}, kind: matmul, m: 64, n: 64, k: 64, dtype: bf16, stream: s" for i in range(200)]
    h = d["host"]
    return [Scenario("200 tiny GEMMs eager", _doc("tiny", 1, ops), span_ms=h["tiny200_eager_ms"]),
            Scenario("200 tiny GEMMs graph", _doc("tiny", 1, ops, "cuda_graph"), span_ms=h["tiny200_graph_ms"],
                     launch="cuda_graph")]


def p2p(d: dict) -> list[Scenario]:
    """Ten back-to-back transfers rank 0 ↔ rank 1: one way, unbatched exchange, batched exchange."""
    out = []
    for nb in (MIB, 16 * MIB, 64 * MIB):
        r = d["p2p"][str(nb)]
        one, unb, bat = [], [], []
        for i in range(10):
            one += [f"name: s{i}, kind: send, peer: 1, bytes: {nb}, ranks: [0], stream: s",
                    f"name: r{i}, kind: recv, peer: 0, bytes: {nb}, ranks: [1], stream: s"]
            unb += [f"name: s{i}, kind: send, peer: 1, bytes: {nb}, ranks: [0], stream: s",
                    f"name: r{i}, kind: recv, peer: 1, bytes: {nb}, ranks: [0], stream: s",
                    f"name: q{i}, kind: recv, peer: 0, bytes: {nb}, ranks: [1], stream: s",
                    f"name: t{i}, kind: send, peer: 0, bytes: {nb}, ranks: [1], stream: s"]
            bat += [f"name: s{i}, kind: send, peer: 1, bytes: {nb}, ranks: [0], stream: ps, p2p_batch: b{i}",
                    f"name: r{i}, kind: recv, peer: 1, bytes: {nb}, ranks: [0], stream: pr, p2p_batch: b{i}",
                    f"name: q{i}, kind: recv, peer: 0, bytes: {nb}, ranks: [1], stream: pr, p2p_batch: b{i}",
                    f"name: t{i}, kind: send, peer: 0, bytes: {nb}, ranks: [1], stream: ps, p2p_batch: b{i}"]
        m = nb // MIB
        out += [Scenario(f"p2p one way {m} MiB (per call)", _doc("one", 2, one), span_ms=r["one_way_us"] / 1e3, per=10),
                Scenario(f"p2p unbatched exchange {m} MiB", _doc("unb", 2, unb), span_ms=r["unbatched_exchange_us"] / 1e3,
                         per=10),
                Scenario(f"p2p batched exchange {m} MiB", _doc("bat", 2, bat), span_ms=r["batched_exchange_us"] / 1e3,
                         per=10)]
    return out


def small_collectives(d: dict) -> list[Scenario]:
    """20 all_reduce / all_gather calls back to back, eager and captured in one graph (fp32 buffers)."""
    out = []
    for nb in ("1024", "65536", "1048576", "4194304"):
        r = d["coll"][nb]
        for kind in ("all_reduce", "all_gather"):
            size = f"bytes: {nb}" + (", buffer: shard" if kind == "all_gather" else "")
            ops = [f"name: c{i}, kind: {kind}, {size}, stream: s" for i in range(20)]
            kb = int(nb) // 1024
            out.append(Scenario(f"{kind} {kb} KiB x20 eager", _doc("b2b", 2, ops), span_ms=r[f"{kind}_b2b_us"] / 1e3,
                                per=20))
            out.append(Scenario(f"{kind} {kb} KiB x20 graph", _doc("g", 2, ops, "cuda_graph"),
                                span_ms=r[f"{kind}_graph_us"] / 1e3, per=20, launch="cuda_graph"))
    return out


def _pinned_yaml(sc: Scenario, profile: HardwareProfile) -> str:
    """Add ``host_us`` to pinned ops so that their host issue time is the measured one (see module doc)."""
    if not sc.pin:
        return sc.yaml
    tl = simulate(lower(load_text(sc.yaml)), profile, gpu_model="waves", max_connections=sc.conns)
    lines, added = [], 0.0  # host_us delays every later op of the rank: pins are applied in program order
    for line in sc.yaml.splitlines():
        name = line.split("name: ")[1].split(",")[0] if "name: " in line else None
        if name in sc.pin:
            issue = _issue_ms(tl, name) + added
            extra = max(0.0, sc.pin[name] - issue)
            added += extra
            line = line[:-1] + f", host_us: {extra * 1e3:.2f}}}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _issue_ms(tl, name: str) -> float:  # type: ignore[no-untyped-def]
    s = next(s for s in tl.spans if s.name == name and s.rank == 0)
    return (s.ready_s if s.ready_s is not None else s.start_s) * 1e3


def predict(sc: Scenario, profile: HardwareProfile, model: str) -> tuple[dict[str, tuple[float, float]], float]:
    """Per-op (ready, end) ms on rank 0 and the span per call (ms)."""
    tl = simulate(lower(load_text(_pinned_yaml(sc, profile))), profile, launch=sc.launch, gpu_model=model,
                  max_connections=sc.conns)
    ops = {s.name: ((s.ready_s if s.ready_s is not None else s.start_s) * 1e3, s.end_s * 1e3)
           for s in tl.spans if s.rank == 0}
    return ops, tl.makespan_s * 1e3 / sc.per


def _err(p: float, m: float) -> str:
    return f"{100 * (p / m - 1):+6.1f}%" if not math.isnan(m) and m > 0 else "    --"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h200x2")
    ap.add_argument("--only", default="", help="substring of the scenario names to run")
    a = ap.parse_args()
    prof = load_profile(a.profile)
    runs = json.loads(DATA.read_text())  # the default run and the CUDA_DEVICE_MAX_CONNECTIONS=1 run
    d, d1 = runs["default"], runs["max_connections_1"]
    scen = streams(d, None) + streams(d1, 1) + nccl_beside(d) + tiny200(d) + p2p(d) + small_collectives(d)
    errs: dict[str, list[float]] = {"waves": []}
    print(f"profile {a.profile}; times in ms; start = stream reached the op (event time / predicted ready time)")
    for sc in scen:
        if a.only not in sc.name:
            continue
        pred = {m: predict(sc, prof, m) for m in errs}
        if sc.measured:
            print(f"\n== {sc.name}")
            print(f"  {'op':14s} {'meas start':>10s} {'end':>8s} | {'waves start':>11s} {'end':>8s} {'err end':>8s}")
            for op, (ms, me) in sc.measured.items():
                row = f"  {op:14s} {ms:10.3f} {me:8.3f}"
                for m in errs:
                    ps, pe = pred[m][0][op]
                    row += f" | {ps:11.3f} {pe:8.3f} {_err(pe, me)}"
                print(row)
            span = max(e for _, e in sc.measured.values()) - min(s for s, _ in sc.measured.values() if not math.isnan(s))
            ends = {m: max(e for _, e in pred[m][0].values()) - min(s for s, _ in pred[m][0].values()) for m in pred}
            if "beside" in sc.name:  # the collective's own start->end is the quantity of interest
                span = sc.measured["coll"][1] - sc.measured["coll"][0]
                ends = {m: pred[m][0]["coll"][1] - pred[m][0]["coll"][0] for m in pred}
            label = "coll span" if "beside" in sc.name else "span"
        else:
            span, ends, label = sc.span_ms, {m: pred[m][1] for m in pred}, "per call" if sc.per > 1 else "span"
            print(f"\n== {sc.name}")
        for m, v in errs.items():
            v.append(abs(ends[m] / span - 1))
        print(f"  {label}: measured {span:.4f}  waves {ends['waves']:.4f} ({_err(ends['waves'], span)})")
    for m, v in errs.items():
        if v:
            print(f"{m}: median |span error| {100 * statistics.median(v):.1f} %, worst {100 * max(v):.1f} %"
                  f" over {len(v)} scenarios")


if __name__ == "__main__":
    main()
