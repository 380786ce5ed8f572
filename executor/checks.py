"""``--check``: run a schedule on real data and verify the result against an unchunked reference.

Approach (a deliberate choice): the schedule language describes costs, not
data flow, so a check needs to know what the ops compute. Rather than add
data-flow fields to every op, each *family* of shipped schedules has a
reference check here, looked up by the schedule's ``name`` (prefix match).
A check does two things:

1. **bind**: give some ops real tensors (:class:`executor.kernels.Binding`)
   instead of random private buffers, so that the chunked ops really produce
   the result;
2. **verify**: after the run, compute the reference the straightforward way and
   compare (relative Frobenius error against a dtype tolerance).

Families
--------
``allgather_mm*`` (S0 of docs/sources.md)
    ``ag{i}`` gathers row chunk i of every rank's input ``X_r`` (M×K) into
    rows ``[i·cs·w, (i+1)·cs·w)`` of the gathered buffer, ``mm{i}_{j}``
    multiplies them by column block j of ``W`` (K×N), ``add{i}_{j}`` adds the
    block into the output (``zero_out`` zeroes it). The reference is the
    unchunked version: ``all_gather_into_tensor`` of the whole ``X`` then one
    ``matmul``; its rows are permuted into the chunked layout before comparing.
    ``zero_out`` has no dependents in the schedule, so on a GPU it is not
    ordered against the adds; the check therefore zeroes the output on the host
    before the checked iteration and binds ``zero_out`` to a no-op.
``tp_ffn*`` (S3)
    Found by shape, not by name: this rank's matmuls in program order are pairs
    ``fc1`` (m_c × F/tp, inner H) then ``fc2`` (m_c × H, inner F/tp) over
    consecutive row chunks of the tokens ``x`` (T×H); the all_reduce ops, in
    order, reduce the fc2 output chunks (or the whole output at once). Rank r
    holds column block r of ``W1`` (H×F) and row block r of ``W2`` (F×H). The
    reference is the single-device FFN ``(x @ W1) @ W2``.

Tolerances: fp32 1e-5 (TF32 off; the chunked sums add the same products in a
different order), tf32 5e-3, fp16/bf16 2e-2.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from executor import ExecError
from executor.kernels import Binding, torch_dtype
from schedsim.graph.ops import Op

__all__ = ["get_checker", "Checker", "CHECKS"]

_TOL = {"fp32": 1e-5, "fp64": 1e-10, "tf32": 5e-3, "fp16": 2e-2, "bf16": 2e-2}


class Checker:
    """Base class: ``bind()`` → op name → Binding; ``before_check()``; ``verify()`` → result dict."""

    family = ""

    def __init__(self, spec: Any, G: Any, ctx: Any) -> None:
        import torch

        self.torch = torch
        self.spec = spec
        self.G = G
        self.ctx = ctx
        self.ops: list[Op] = sorted((G.nodes[n]["op"] for n in G.nodes if G.nodes[n]["op"].rank == ctx.rank),
                                    key=lambda o: o.seq)
        self.by_name = {o.name: o for o in self.ops}

    def _gen(self, seed: int) -> Any:
        return self.torch.Generator(device="cpu").manual_seed(seed)

    def _rand(self, shape: tuple[int, ...], seed: int, dtype: Any) -> Any:
        t = self.torch.rand(shape, generator=self._gen(seed), dtype=self.torch.float32) * 2 - 1
        return t.to(dtype).to(self.ctx.device)

    def _dtype(self, name: str) -> Any:
        dt = torch_dtype(name)
        if not self.ctx.cuda and dt in (self.torch.float16, self.torch.bfloat16):
            return dt  # CPU half matmul works (slowly) in torch >= 2.1
        return dt

    def bind(self) -> dict[str, Binding]:
        raise NotImplementedError

    def before_check(self) -> None:
        """Host-side reset before the checked iteration (after a device sync)."""

    def verify(self) -> dict[str, Any]:
        raise NotImplementedError

    def _result(self, got: Any, ref: Any, dtype: str, what: str) -> dict[str, Any]:
        torch = self.torch
        g, r = got.double(), ref.double()
        err = float(torch.linalg.norm(g - r) / max(float(torch.linalg.norm(r)), 1e-30))
        tol = _TOL.get(dtype, 2e-2)
        return {"ok": bool(err <= tol and torch.isfinite(g).all()), "rel_err": err, "tol": tol, "what": what,
                "family": self.family}


class AllGatherMM(Checker):
    family = "allgather_mm"

    def bind(self) -> dict[str, Binding]:
        torch = self.torch
        p = self.spec.params
        self.w = int(self.spec.world_size)
        try:
            M, K, N, ch = int(p["M"]), int(p["K"]), int(p["N"]), int(p["chunks"])
        except KeyError as e:
            raise ExecError(f"--check allgather_mm: the schedule lacks parameter {e}") from None
        self.dt_name = str(p.get("dtype", "fp32"))
        dt = self._dtype(self.dt_name)
        if M % ch or N % ch:
            raise ExecError(f"--check allgather_mm: M={M} and N={N} must be divisible by chunks={ch}")
        self.M, self.K, self.N, self.ch = M, K, N, ch
        cs, nb, w = M // ch, N // ch, self.w
        r = self.ctx.rank
        self.x = self._rand((M, K), 1000 + r, dt)
        self.W = self._rand((K, N), 7, dt)
        dev = self.ctx.device
        self.gathered = torch.zeros((w * M, K), dtype=dt, device=dev)
        self.out = torch.zeros((w * M, N), dtype=dt, device=dev)
        b: dict[str, Binding] = {}
        need = [f"ag{i}" for i in range(ch)] + [f"mm{i}_{j}" for i in range(ch) for j in range(ch)]
        missing = [n for n in need if n not in self.by_name]
        if missing:
            raise ExecError(f"--check allgather_mm: ops {missing[:4]} not found; the check expects the layout of "
                            "schedules/allgather_mm.yaml (ag{i}, mm{i}_{j}, add{i}_{j}, zero_out)")
        for i in range(ch):
            rows = slice(i * cs * w, (i + 1) * cs * w)
            b[f"ag{i}"] = Binding(inp=self.x[i * cs:(i + 1) * cs], out=self.gathered[rows])
            for j in range(ch):
                cols = slice(j * nb, (j + 1) * nb)
                if ch == 1:
                    b[f"mm{i}_{j}"] = Binding(a=self.gathered[rows], b=self.W, c=self.out)
                    continue
                tmp = torch.zeros((cs * w, nb), dtype=dt, device=dev)
                b[f"mm{i}_{j}"] = Binding(a=self.gathered[rows], b=self.W[:, cols], c=tmp)
                blk = self.out[rows, cols]
                if f"add{i}_{j}" in self.by_name:
                    b[f"add{i}_{j}"] = Binding(fn=_adder(blk, tmp))
                else:
                    b[f"mm{i}_{j}"] = Binding(a=self.gathered[rows], b=self.W[:, cols], c=tmp)
        if "zero_out" in self.by_name:
            b["zero_out"] = Binding(fn=lambda: None)
        return b

    def before_check(self) -> None:
        self.out.zero_()

    def verify(self) -> dict[str, Any]:
        torch = self.torch
        import torch.distributed as dist

        w, M, cs = self.w, self.M, self.M // self.ch
        full = torch.empty((w * M, self.K), dtype=self.x.dtype, device=self.ctx.device)
        if w > 1:
            grp = self.ctx.groups.get(tuple(range(w)))
            ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            ag(full, self.x, group=grp)
        else:
            full.copy_(self.x)
        if self.ctx.cuda:
            torch.backends.cuda.matmul.allow_tf32 = self.dt_name == "tf32"
        ref = torch.matmul(full, self.W)
        idx = torch.empty(w * M, dtype=torch.long)
        for i in range(self.ch):
            for r in range(w):
                base_out = i * cs * w + r * cs
                base_ref = r * M + i * cs
                idx[base_out:base_out + cs] = torch.arange(base_ref, base_ref + cs)
        ref_chunked = ref[idx.to(ref.device)]
        return self._result(self.out, ref_chunked, self.dt_name,
                            f"chunked output ({self.ch} chunks) == all_gather_into_tensor + one matmul")


def _adder(blk: Any, tmp: Any) -> Callable[[], Any]:
    return lambda: blk.add_(tmp)


class TpFfn(Checker):
    family = "tp_ffn"

    def bind(self) -> dict[str, Binding]:
        torch = self.torch
        mms = [o for o in self.ops if o.kind == "matmul"]
        ars = [o for o in self.ops if o.kind == "all_reduce"]
        if len(mms) < 2 or len(mms) % 2 or not ars:
            raise ExecError("--check tp_ffn: expected pairs of matmuls (fc1, fc2) and all_reduce(s) on every rank; "
                            f"found {len(mms)} matmul(s) and {len(ars)} all_reduce(s) on rank {self.ctx.rank}")
        H, Fs = mms[0].k, mms[0].n
        pairs = []
        for a, b in zip(mms[0::2], mms[1::2]):
            if not (a.k == H and a.n == Fs and b.m == a.m and b.k == Fs and b.n == H):
                raise ExecError(f"--check tp_ffn: matmuls {a.name} ({a.m}x{a.n}x{a.k}) and {b.name} "
                                f"({b.m}x{b.n}x{b.k}) are not an fc1 (m x F/tp, inner H) / fc2 (m x H, inner F/tp) "
                                "pair")
            pairs.append((a, b))
        grp = ars[0].group
        tp = len(grp)
        self.tp_rank = grp.index(self.ctx.rank)
        self.dt_name = mms[0].dtype or "fp32"
        dt = self._dtype(self.dt_name)
        T = sum(a.m for a, _ in pairs)
        F = Fs * tp
        self.H, self.F, self.T = H, F, T
        self.x = self._rand((T, H), 11, dt)
        W1 = self._rand((H, F), 12, dt)
        W2 = self._rand((F, H), 13, dt)
        r = self.tp_rank
        self.W1, self.W2 = W1, W2
        w1 = W1[:, r * Fs:(r + 1) * Fs].contiguous()
        w2 = W2[r * Fs:(r + 1) * Fs, :].contiguous()
        self.y = torch.zeros((T, H), dtype=dt, device=self.ctx.device)
        b: dict[str, Binding] = {}
        off = 0
        chunks = []
        for a, c in pairs:
            h = torch.zeros((a.m, Fs), dtype=dt, device=self.ctx.device)
            b[a.name] = Binding(a=self.x[off:off + a.m], b=w1, c=h)
            b[c.name] = Binding(a=h, b=w2, c=self.y[off:off + a.m])
            chunks.append((off, a.m))
            off += a.m
        esz = self.x.element_size()
        if len(ars) == 1 and int(ars[0].nbytes) == T * H * esz:
            b[ars[0].name] = Binding(inp=self.y)
        elif len(ars) == len(chunks):
            for ar, (o, m) in zip(ars, chunks):
                if int(ar.nbytes) != m * H * esz:
                    raise ExecError(f"--check tp_ffn: all_reduce {ar.name} moves {int(ar.nbytes)} B but its fc2 chunk "
                                    f"has {m * H * esz} B")
                b[ar.name] = Binding(inp=self.y[o:o + m])
        else:
            raise ExecError(f"--check tp_ffn: {len(ars)} all_reduce(s) for {len(chunks)} fc1/fc2 chunk(s)")
        return b

    def verify(self) -> dict[str, Any]:
        torch = self.torch
        if self.ctx.cuda:
            torch.backends.cuda.matmul.allow_tf32 = self.dt_name == "tf32"
        ref = torch.matmul(torch.matmul(self.x, self.W1), self.W2)
        return self._result(self.y, ref, self.dt_name,
                            "TP output (all_reduce of fc2(fc1(x)) shards) == single-device FFN")


#: schedule-name regex → checker class
CHECKS: list[tuple[str, type[Checker]]] = [(r"^allgather_mm", AllGatherMM), (r"^tp_ffn", TpFfn)]


def get_checker(spec: Any, G: Any, ctx: Any) -> Checker:
    """The reference check for ``spec.name``.

    Raises
    ------
    ExecError
        No check is known for that schedule.
    """
    for pat, cls in CHECKS:
        if re.search(pat, spec.name):
            return cls(spec, G, ctx)
    known = ", ".join(p.strip("^") + "*" for p, _ in CHECKS)
    raise ExecError(f"--check: no reference check for schedule {spec.name!r} (known: {known})\n"
                    "  fix: drop --check, or add a Checker to executor/checks.py")
