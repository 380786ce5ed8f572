"""Random schedules for the differential suite, written in the schedule language (a dict that
:func:`schedsim.spec.loader.load_text` reads as YAML, JSON being YAML), so the package's road (spec → Program →
compiled loop) and the oracle (the same spec as a networkx graph → Python loop) start from one input.

:func:`random_schedule` draws 1-5 ranks and up to 16 steps; each step is compute on some ranks (GEMMs of one to
many waves, batched and repeated; memory-bound, FLOP-only and fixed-duration kernels, 0 s included; copies in
each direction, 0 bytes included) on random streams (up to 12 per rank: more than the hardware queues), with
random extra dependencies on earlier ops of the rank and some host time; a collective of any kind over a random
group (one rank included); crossed collectives (two ranks reach two all_reduces in opposite orders: a hang);
crossed lone send/recv (a hang only while NCCL serializes lone send/recv per communicator: the engine reruns
without it and warns); a lone send/recv; or a batched exchange (``p2p_batch``).
"""

from __future__ import annotations

import json
import random
from typing import Any

from schedsim.kinds import COLLECTIVE_KINDS

__all__ = ["random_schedule"]

ROOTED = ("broadcast", "reduce", "scatter", "gather")


def _compute(rng: random.Random, name: str, r: int, stream: str, nb: int) -> dict[str, Any]:
    """A GEMM (batched, repeated), a memory-bound, FLOP-only or fixed-duration (0 s included) kernel, or a copy."""
    c, rep = rng.randint(0, 5), rng.choice((1, 1, 3))
    base: dict[str, Any] = {"name": name, "ranks": [r], "stream": stream}
    if c == 0:
        n = rng.choice((128, 1024, 8192))
        return {**base, "kind": "matmul", "m": n, "n": n, "k": 1024, "batch": rng.choice((1, 4)), "dtype": "bf16",
                "repeat": rep, "host_us": rng.choice((0.0, 10.0))}
    if c == 1:
        return {**base, "kind": "compute", "bytes": rng.choice((1 << 16, 1 << 26)), "repeat": rep}
    if c == 2:
        return {**base, "kind": "compute", "duration_us": rng.choice((0.0, 1.0, 50.0)), "repeat": rep}
    if c == 3:
        return {**base, "kind": "compute", "flops": rng.choice((0.0, 1e9)), "bytes": rng.choice((0, 1000000)),
                "repeat": rep}
    return {**base, "kind": "memcpy", "bytes": nb // 4, "direction": rng.choice(("h2d", "d2h", "d2d"))}


class _Writer:
    """The op entries of one schedule, each rank's in program order, with its dependencies drawn as they come."""

    def __init__(self, rng: random.Random, world: int) -> None:
        self.rng, self.world = rng, world
        self.ops: list[dict[str, Any]] = []
        self.earlier: list[list[str]] = [[] for _ in range(world)]

    def add(self, entry: dict[str, Any], deps: bool = True) -> None:
        """One entry on the ranks it names; with ``deps``, random dependencies on earlier ops of its rank (an
        entry of one rank only)."""
        ranks = entry["ranks"]
        if deps and len(ranks) == 1:
            earlier = self.earlier[ranks[0]]
            picked = self.rng.sample(earlier, min(len(earlier), self.rng.choice((0, 0, 1, 2))))
            if picked:
                entry["deps"] = picked
        self.ops.append(entry)
        for r in ranks:
            self.earlier[r].append(entry["name"])

    def collective(self, name: str, kind: str, group: list[int], nb: int, stream: str) -> None:
        entry: dict[str, Any] = {"name": name, "kind": kind, "ranks": group, "group": group, "bytes": nb,
                                 "dtype": "bf16", "stream": stream, "host_us": self.rng.choice((0.0, 0.0, 10.0))}
        if kind in ROOTED:
            entry["root"] = group[0]
        self.add(entry)

    def p2p(self, name: str, kind: str, r: int, peer: int, nb: int, stream: str, batch: str | None = None) -> None:
        entry: dict[str, Any] = {"name": name, "kind": kind, "ranks": [r], "peer": peer, "bytes": nb, "stream": stream}
        if batch is not None:
            entry["p2p_batch"] = batch
        self.add(entry, deps=batch is None)

    def exchange(self, name: str, a: int, b: int, nb: int, roll: float, last_stream: str) -> None:
        """Crossed lone send/recv (sends and recvs on two streams), a lone send/recv, or batch_isend_irecv on both
        sides."""
        if roll < 0.85:
            self.p2p(f"{name}f", "send", a, b, nb, "p")
            self.p2p(f"{name}g", "send", b, a, nb, "p")
            self.p2p(f"{name}g", "recv", a, b, nb, "q")
            self.p2p(f"{name}f", "recv", b, a, nb, "q")
            return
        stream = self.rng.choice(("c0", "p", last_stream))
        if self.rng.random() < 0.5:
            self.p2p(name, "send", a, b, nb, stream)
            self.p2p(name, "recv", b, a, nb, stream)
            return
        self.p2p(f"{name}s", "send", a, b, nb, stream, f"x{name}")
        self.p2p(f"{name}r", "recv", a, b, nb, stream, f"x{name}")
        self.p2p(f"{name}r", "recv", b, a, nb, stream, f"x{name}")
        self.p2p(f"{name}s", "send", b, a, nb, stream, f"x{name}")


def random_schedule(seed: int) -> str:
    """The text of a random schedule (module docstring), deterministic in ``seed``."""
    rng = random.Random(seed)
    world = rng.randint(1, 5)
    w = _Writer(rng, world)
    streams = [f"s{i}" for i in range(rng.choice((2, 3, 12)))]
    for s in range(rng.randint(1, 16)):
        roll = rng.random()
        nb = rng.choice((0, 1 << 10, 1 << 24))
        if roll < 0.5 or world == 1 and roll < 0.8:
            for r in rng.sample(range(world), rng.randint(1, world)):
                w.add(_compute(rng, f"o{s}", r, rng.choice(streams), nb))
        elif roll < 0.75 or world == 1:
            group = sorted(rng.sample(range(world), rng.randint(1, world)))
            w.collective(f"o{s}", rng.choice(COLLECTIVE_KINDS), group, nb, rng.choice(("c0", "c1", streams[0])))
        elif roll < 0.8:  # crossed: rank a reaches x then y, rank b y then x (one communicator): a hang
            a, b = sorted(rng.sample(range(world), 2))
            for r, names in ((a, ("x", "y")), (b, ("y", "x"))):
                for x in names:
                    w.add({"name": f"o{s}{x}", "kind": "all_reduce", "ranks": [r], "group": [a, b], "bytes": nb,
                           "stream": "c0"}, deps=False)
        else:
            a, b = rng.sample(range(world), 2)
            w.exchange(f"o{s}", a, b, nb, roll, streams[-1])
    doc = {"schema_version": 1, "name": f"gen{seed}", "world_size": world, "launch": "eager", "ops": w.ops}
    return json.dumps(doc)
