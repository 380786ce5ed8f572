"""Materialise schedule ops as preallocated tensors and launch closures.

Every op becomes an :class:`OpImpl` whose ``run()`` enqueues the op's work on
the *current* stream (CUDA) or runs it (CPU) and returns a ``Work`` for
asynchronous communication on gloo (else None). All tensors are allocated once,
before the first iteration; nothing allocates inside an iteration, so a CUDA
graph can capture it.

How each kind runs
------------------
``matmul``
    ``torch.matmul(a, b, out=c)`` on random inputs of the op's dtype
    (``[batch,] m×k @ k×n``). ``fp32`` runs with TF32 off and ``tf32`` with it
    on (``torch.backends.cuda.matmul.allow_tf32`` is switched per op when a
    schedule mixes them). ``fp8`` uses ``torch._scaled_mm`` and ``int8``
    ``torch._int_mm`` where the build has them.
``memcpy``
    ``dst.copy_(src, non_blocking=True)`` between a pinned host buffer and a
    device buffer (h2d, d2h) or two device buffers (d2d). On CPU ranks all
    three are host memory copies.
``compute``
    ``duration_us``: a *busy kernel* calibrated to that duration: on CUDA a
    bf16 GEMM whose row count is fitted (time = a + b·rows from three timed
    sizes, then corrected once), repeated when the duration is long, so it
    occupies the SMs like real compute; below the GEMM's floor it falls back to
    ``torch.cuda._sleep`` (one spinning thread). On CPU: the host sleeps, then
    spins for the last 2 ms.
    ``flops`` (with or without ``bytes``): a GEMM of that many FLOP in the op's
    dtype (square-ish, k = n = min(4096, cube root)). ``bytes`` only: an
    elementwise kernel moving that many bytes, ``torch.add(a, b, out=c)`` on
    three byte tensors of N/3 each (two read, one written: S0's
    ``output_chunk.add_``), so it runs on the SMs as the model's memory-bound
    kernel does. Formerly it was ``dst.copy_(src)``, which CUDA runs as
    a "Memcpy DtoD", not a kernel (``benchmarks/probes/sm/copy_beside_gemm.py``).
collectives
    torch.distributed into preallocated buffers, sized by the nccl-tests size
    column (``Op.nbytes``): ``all_reduce`` in place on S bytes;
    ``all_gather_into_tensor`` (S/n in, S out); ``reduce_scatter_tensor`` (S in,
    S/n out); ``all_to_all_single`` (S in and out); ``broadcast``/``reduce`` on S;
    ``scatter``/``gather`` with S on the root, S/n per rank. On CUDA with
    torch ≥ 2.8 they are called with ``async_op=False`` under the op's stream, so
    NCCL runs on that stream (PR #150398); on older torch ``async_op=True``
    then ``work.wait()``, which orders the op's stream after NCCL's. On gloo
    they are asynchronous (the host keeps issuing) and return their Work.
``send`` / ``recv``
    ``dist.isend``/``dist.irecv``. On CUDA the op's stream then waits for the
    Work (the host does not block). The runtime turns the ops of a ``p2p:
    batched`` group into one ``batch_isend_irecv`` (:mod:`executor.lean`), from
    ``OpImpl.p2p``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from executor import ExecError
from schedsim.graph.ops import Op
from schedsim.kinds import KINDS

__all__ = ["OpImpl", "Materializer", "torch_dtype", "Binding", "script_call"]


def torch_dtype(name: str | None, *, for_comm: bool = False) -> Any:
    """torch dtype of a schedule dtype name (``tf32`` → float32; ``fp8`` → float8_e4m3fn, or uint8 for comm)."""
    import torch

    name = name or "fp32"
    table = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
             "bf16": torch.bfloat16, "int8": torch.int8, "int32": torch.int32, "int64": torch.int64,
             "uint8": torch.uint8}
    if name == "fp8":
        return torch.uint8 if for_comm else getattr(torch, "float8_e4m3fn", torch.uint8)
    return table[name]


@dataclass
class Binding:
    """Tensors (or a function) a ``--check`` reference supplies for one op instead of random buffers.

    Attributes
    ----------
    a, b, c : tensor, optional
        matmul operands and output (``c = a @ b``).
    inp, out : tensor, optional
        collective / memcpy input and output (same meaning as the buffers above).
    fn : callable, optional
        For ``compute`` ops: the work to run (e.g. ``out.zero_()``).
    """

    a: Any = None
    b: Any = None
    c: Any = None
    inp: Any = None
    out: Any = None
    fn: Callable[[], Any] | None = None


@dataclass
class OpImpl:
    """One op ready to launch.

    Attributes
    ----------
    op : Op
    run : callable
        Enqueue/run the op on the current stream; returns a Work for gloo async comm, else None.
    is_async : bool
        True for communication on gloo (the host does not wait for it).
    note : str
        How the op was materialised (kept in the timeline's meta).
    fast : callable, optional
        The bare launch the lean loop calls instead of ``run`` (no per-call TF32 switch or wrapper
        lambda; e.g. ``functools.partial(torch.matmul, a, b, out=c)``). None: the lean loop calls ``run``.
    tf32 : bool, optional
        The TF32 setting ``fast`` assumes (matmuls only); the lean loop sets it once when every matmul
        of the rank agrees, else it calls ``run``.
    p2p : tuple, optional
        ``(dist.isend or dist.irecv, buffer, peer, tag)`` of a send/recv, for ``batch_isend_irecv``.
    """

    op: Op
    run: Callable[[], Any]
    is_async: bool = False
    note: str = ""
    tensors: list[Any] = field(default_factory=list)
    fast: Callable[[], Any] | None = None
    tf32: bool | None = None
    p2p: tuple[Any, Any, int, int] | None = None


class _BusyGemm:
    """A bf16 (CUDA) GEMM whose size is fitted to a requested duration."""

    K = 2048

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        self.dtype = torch.bfloat16
        self.max_rows = 131072
        self.b = torch.randn(self.K, self.K, device=device, dtype=self.dtype)
        self.a = torch.randn(self.max_rows, self.K, device=device, dtype=self.dtype)
        self.c = torch.empty(self.max_rows, self.K, device=device, dtype=self.dtype)
        self.fit: tuple[float, float] | None = None
        self.sleep_cycles_per_s: float | None = None

    def _time(self, fn: Callable[[], Any], reps: int = 5) -> float:
        import torch

        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        ts = []
        for _ in range(reps):
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1e-3)
        ts.sort()
        return ts[len(ts) // 2]

    def _rows_time(self, rows: int) -> float:
        import torch

        a, c = self.a[:rows], self.c[:rows]
        return self._time(lambda: torch.matmul(a, self.b, out=c))

    def calibrate(self) -> None:
        xs = [2048, 16384, 65536]
        ys = [self._rows_time(x) for x in xs]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        self.fit = (my - slope * mx, max(slope, 1e-12))

    def make(self, duration_s: float) -> tuple[Callable[[], Any], str]:
        """A closure taking about ``duration_s`` seconds of GPU time, and a note saying how."""
        import torch

        if self.fit is None:
            self.calibrate()
        a0, slope = self.fit  # type: ignore[misc]
        floor = a0 + slope * 64
        if duration_s < floor:
            if self.sleep_cycles_per_s is None:
                cyc = 1_000_000
                self.sleep_cycles_per_s = cyc / max(self._time(lambda: torch.cuda._sleep(cyc)), 1e-9)
            cycles = max(1, int(duration_s * self.sleep_cycles_per_s))
            return (lambda: torch.cuda._sleep(cycles)), f"torch.cuda._sleep({cycles}) (below the GEMM floor)"
        reps = max(1, math.ceil((duration_s - a0) / (slope * self.max_rows)))
        per = duration_s / reps
        rows = int(min(self.max_rows, max(64, (per - a0) / slope)))
        got = self._rows_time(rows)  # one correction step against the linear fit
        if got > 0:
            rows = int(min(self.max_rows, max(64, rows * per / got)))
        a, c, b = self.a[:rows], self.c[:rows], self.b

        def run() -> None:
            for _ in range(reps):
                torch.matmul(a, b, out=c)

        return run, f"busy bf16 GEMM {rows}x{self.K}x{self.K} x{reps} for {duration_s * 1e6:.1f} us"


def script_call(fn: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> Callable[[], Any]:
    """``fn(*args, **kw)`` bound as a script writes the call: keywords whose value is ``fn``'s default left out
    (``group=None``, the default group; ``async_op=False``), the rest passed by position where ``fn``'s signature
    allows (``broadcast(t, 0)`` for ``broadcast(t, src=0)``), keywords only past a left-out parameter.

    What it saves is per call, in the lean loop: a ``functools.partial`` with keywords copies its keyword dict on
    every call, and ``torch.distributed``'s collectives (wrapped by ``_exception_logger(*args, **kwargs)``) build
    two more; ``partial(all_reduce, t, group=None, async_op=False)()`` took 1.50 µs against 0.41 for
    ``partial(all_reduce, t)()`` (a stand-in with the wrapper and ``all_reduce``'s signature, 2-core VM, CPython
    3.11), about 1 µs a collective that a hand-written ``dist.all_reduce(t)`` does not spend (docs/validation.md,
    "CPU analysis of the recorded runs"). A signature ``inspect`` cannot read keeps every keyword.

    >>> def all_reduce(tensor, op="sum", group=None, async_op=False): return (tensor, op, group, async_op)
    >>> f = script_call(all_reduce, ("t",), {"group": None, "async_op": False})
    >>> f.args, f.keywords, f()
    (('t',), {}, ('t', 'sum', None, False))
    >>> script_call(all_reduce, ("t",), {"group": "g", "async_op": False}).keywords
    {'group': 'g'}
    """
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return functools.partial(fn, *args, **kw)
    params = sig.parameters

    def is_default(k: str, v: Any) -> bool:
        d = params[k].default if k in params else inspect.Parameter.empty
        return v is d or (type(v) is type(d) and isinstance(v, (bool, int, float, str)) and v == d)

    kept = {k: v for k, v in kw.items() if not is_default(k, v)}
    try:
        bound = sig.bind(*args, **kept)
    except TypeError:
        return functools.partial(fn, *args, **kw)
    return functools.partial(fn, *bound.args, **bound.kwargs)


class Materializer:
    """Allocates buffers and builds :class:`OpImpl` closures for one rank.

    Parameters
    ----------
    ctx : DistContext
    seed : int
        Random inputs are drawn from ``torch.Generator`` seeded with ``seed + rank``.
    mem_budget_bytes : float
        Input buffers of ops with the same shape are shared round-robin when the
        distinct buffers would exceed this budget (outputs stay distinct per op
        when possible). On CUDA the default is 40% of free memory.
    """

    def __init__(self, ctx: Any, seed: int = 0, mem_budget_bytes: float | None = None) -> None:
        import torch

        self.ctx = ctx
        self.torch = torch
        self.dev = ctx.device
        self.gen = torch.Generator(device="cpu").manual_seed(seed + ctx.rank)
        if mem_budget_bytes is None:
            if ctx.cuda:
                free, _total = torch.cuda.mem_get_info(ctx.device)
                mem_budget_bytes = 0.4 * free
            else:
                mem_budget_bytes = 2e9
        self.budget = mem_budget_bytes
        self.allocated = 0.0
        self._pool: dict[tuple[Any, ...], list[Any]] = {}
        self._busy: _BusyGemm | None = None
        self._tf32_state: bool | None = None
        import torch.distributed as dist

        self.dist = dist
        self.async_comm = not ctx.cuda
        ver = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
        self.nccl_current_stream = ver >= (2, 8)

    # -- buffers -----------------------------------------------------------
    def _rand(self, shape: tuple[int, ...], dtype: Any, device: Any = None, pin: bool = False) -> Any:
        torch = self.torch
        device = device or self.dev
        if dtype.is_floating_point and dtype.itemsize >= 2:
            t = torch.rand(shape, generator=self.gen, dtype=torch.float32).to(dtype)
        else:
            t = torch.randint(0, 4, shape, generator=self.gen, dtype=torch.int32).to(dtype)
        if pin and device.type == "cpu" and self.ctx.cuda:
            return t.pin_memory()
        return t.to(device)

    def buffer(self, key: tuple[Any, ...], shape: tuple[int, ...], dtype: Any, *, device: Any = None,
               pin: bool = False, distinct: bool = True) -> Any:
        """A buffer of ``shape``/``dtype``: new if the budget allows, else shared round-robin with same-key ones."""
        nbytes = math.prod(shape) * dtype.itemsize
        lst = self._pool.setdefault((key, shape, str(dtype), str(device), pin), [])
        if lst and (not distinct or self.allocated + nbytes > self.budget):
            t = lst.pop(0)
            lst.append(t)
            return t
        t = self._rand(shape, dtype, device, pin)
        self.allocated += nbytes
        lst.append(t)
        return t

    def _set_tf32(self, on: bool) -> None:
        if self._tf32_state is not on and self.ctx.cuda:
            self.torch.backends.cuda.matmul.allow_tf32 = on
            self._tf32_state = on

    # -- ops ---------------------------------------------------------------
    def make(self, op: Op, binding: Binding | None = None) -> OpImpl:
        """Build the :class:`OpImpl` of ``op`` (see the module docstring for each kind).

        Raises
        ------
        ExecError
            An op kind or dtype this build cannot run.
        """
        info = KINDS.get(op.kind)  # the kind's kernel builder (schedsim.kinds registry: KindInfo.executor)
        build = getattr(self, info.executor, None) if info is not None else None
        if build is None:
            raise ExecError(f"{op.source}: op {op.id}: kind {op.kind!r} cannot be executed")
        return cast(OpImpl, build(op, binding))

    def _matmul(self, op: Op, bd: Binding | None) -> OpImpl:
        torch = self.torch
        dt = op.dtype or "fp32"
        tdt = torch_dtype(dt)
        shape_a = (op.batch, op.m, op.k) if op.batch > 1 else (op.m, op.k)
        shape_b = (op.batch, op.k, op.n) if op.batch > 1 else (op.k, op.n)
        shape_c = (op.batch, op.m, op.n) if op.batch > 1 else (op.m, op.n)
        if dt in ("fp8", "int8"):
            return self._lowp_matmul(op, dt, shape_a, shape_b, shape_c)
        if bd is not None and bd.c is not None:
            a, b, c = bd.a, bd.b, bd.c
        else:
            a = self.buffer(("mmA",), shape_a, tdt)
            b = self.buffer(("mmB",), shape_b, tdt)
            c = self.buffer(("mmC",), shape_c, tdt)
        tf32 = dt == "tf32"
        set_tf32 = self._set_tf32

        def run() -> None:
            set_tf32(tf32)
            torch.matmul(a, b, out=c)

        return OpImpl(op, run, note=f"torch.matmul {tuple(shape_a)}@{tuple(shape_b)} {dt}", tensors=[a, b, c],
                      fast=functools.partial(torch.matmul, a, b, out=c), tf32=tf32)

    def _lowp_matmul(self, op: Op, dt: str, sa: tuple[int, ...], sb: tuple[int, ...], sc: tuple[int, ...]) -> OpImpl:
        torch = self.torch
        if op.batch > 1:
            raise ExecError(f"{op.source}: op {op.id}: batched {dt} matmul is not supported by the executor\n"
                            "  fix: use batch 1, or bf16/fp16")
        if dt == "fp8" and self.ctx.cuda and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
            a = self._rand(sa, torch.float32).to(torch.float8_e4m3fn)
            b = self._rand((op.n, op.k), torch.float32).to(torch.float8_e4m3fn).t()  # column-major B
            one = torch.ones((), device=self.dev)

            def run() -> None:
                torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

            return OpImpl(op, run, note="torch._scaled_mm fp8 e4m3 -> bf16 (allocates its output)")
        if dt == "int8" and self.ctx.cuda and hasattr(torch, "_int_mm"):
            a = self._rand(sa, torch.int8)
            b = self._rand(sb, torch.int8)
            c = torch.empty(sc, dtype=torch.int32, device=self.dev)

            def run_i() -> None:
                torch._int_mm(a, b, out=c)

            return OpImpl(op, run_i, note="torch._int_mm int8 -> int32")
        raise ExecError(f"{op.source}: op {op.id}: {dt} matmul needs CUDA and torch._scaled_mm/_int_mm\n"
                        "  fix: run on a GPU with a recent torch, or use --set dtype=bf16")

    def _elementwise_bytes(self, nbytes: float) -> tuple[Callable[[], Any], list[Any]]:
        """``torch.add(a, b, out=c)`` on three uint8 tensors of ``nbytes`` / 3 each (the op's own buffers)."""
        torch = self.torch
        third = max(1, int(nbytes // 3))
        a = self.buffer(("ewa",), (third,), torch.uint8)
        b = self.buffer(("ewb",), (third,), torch.uint8)
        c = self.buffer(("ewc",), (third,), torch.uint8)
        return functools.partial(torch.add, a, b, out=c), [a, b, c]

    def _compute(self, op: Op, bd: Binding | None) -> OpImpl:
        torch = self.torch
        if bd is not None and bd.fn is not None:
            return OpImpl(op, bd.fn, note="--check binding")
        if op.duration_s is not None:
            d = float(op.duration_s)
            if self.ctx.cuda:
                if self._busy is None:
                    self._busy = _BusyGemm(self.dev)
                fn, note = self._busy.make(d)
                return OpImpl(op, fn, note=note)

            def spin() -> None:
                end = time.perf_counter() + d
                left = end - time.perf_counter()
                if left > 0.004:
                    time.sleep(left - 0.002)
                while time.perf_counter() < end:
                    pass

            return OpImpl(op, spin, note=f"host busy-wait {d * 1e6:.1f} us (CPU rank)")
        if op.flops:
            tdt = torch_dtype(op.dtype if op.dtype not in ("fp8", "int8") else "bf16")
            if not self.ctx.cuda and tdt in (torch.float16, torch.bfloat16):
                tdt = torch.float32
            side = int(min(4096, max(16, round((op.flops / 2.0) ** (1 / 3)))))
            m = max(1, int(round(op.flops / (2.0 * side * side))))
            a = self.buffer(("cfA",), (m, side), tdt)
            b = self.buffer(("cfB",), (side, side), tdt, distinct=False)
            c = self.buffer(("cfC",), (m, side), tdt)
            tf32 = op.dtype == "tf32"
            set_tf32 = self._set_tf32

            def run() -> None:
                set_tf32(tf32)
                torch.matmul(a, b, out=c)

            return OpImpl(op, run, note=f"GEMM {m}x{side}x{side} for {op.flops:.3g} FLOP",
                          fast=functools.partial(torch.matmul, a, b, out=c), tf32=tf32)
        fn, ts = self._elementwise_bytes(op.nbytes)
        return OpImpl(op, fn, note=f"elementwise add moving {op.nbytes:.3g} B", tensors=ts, fast=fn)

    def _memcpy(self, op: Op, bd: Binding | None) -> OpImpl:
        torch = self.torch
        n = max(1, int(op.nbytes))
        cpu = torch.device("cpu")
        d = op.direction or "d2d"
        if bd is not None and bd.out is not None:
            src, dst = bd.inp, bd.out
        elif d == "h2d":
            src = self.buffer(("h2d_src",), (n,), torch.uint8, device=cpu, pin=True)
            dst = self.buffer(("h2d_dst",), (n,), torch.uint8)
        elif d == "d2h":
            src = self.buffer(("d2h_src",), (n,), torch.uint8)
            dst = self.buffer(("d2h_dst",), (n,), torch.uint8, device=cpu, pin=True)
        else:
            src = self.buffer(("d2d_src",), (n,), torch.uint8)
            dst = self.buffer(("d2d_dst",), (n,), torch.uint8)
        nb = self.ctx.cuda

        def run() -> None:
            dst.copy_(src, non_blocking=nb)

        fast = functools.partial(dst.copy_, src, non_blocking=nb)
        where = "pinned host <-> device" if self.ctx.cuda and d != "d2d" else ("device" if self.ctx.cuda else "host")
        return OpImpl(op, run, note=f"copy_ {d} {n} B ({where})", tensors=[src, dst], fast=fast)

    def _comm_buf(self, key: str, nbytes: float, dtype: Any, divisor: int = 1) -> tuple[Any, Any]:
        """A buffer of ``nbytes`` bytes with an element count divisible by ``divisor`` (uint8 fallback)."""
        torch = self.torch
        isz = dtype.itemsize
        n = int(nbytes)
        if n % (isz * divisor) != 0:
            dtype, isz = torch.uint8, 1
        count = max(divisor, n // isz)
        count -= count % divisor
        return self.buffer((key,), (count,), dtype), dtype

    def _all_reduce(self, op: Op, bd: Binding | None) -> OpImpl:
        tdt = torch_dtype(op.dtype, for_comm=True)
        buf = bd.inp if bd is not None and bd.inp is not None else self._comm_buf("ar", op.nbytes, tdt)[0]
        return self._collective(op, self.dist.all_reduce, (buf,))

    def _full_and_piece(self, op: Op, key: str, bound: tuple[Any, Any] | None) -> tuple[Any, Any]:
        """(a buffer of ``op.nbytes``, one of 1/n of it) for an all_gather or reduce_scatter over n ranks: the op's
        bound tensors where it has them, else the Materializer's own (keys ``<key>_full``, ``<key>_piece``)."""
        if bound is not None:
            return bound
        n = len(op.group)
        full, dt2 = self._comm_buf(f"{key}_full", op.nbytes, torch_dtype(op.dtype, for_comm=True), n)
        return full, self.buffer((f"{key}_piece",), (full.numel() // n,), dt2)

    def _all_gather(self, op: Op, bd: Binding | None) -> OpImpl:
        dist = self.dist
        out, inp = self._full_and_piece(op, "ag", (bd.out, bd.inp) if bd is not None and bd.out is not None else None)
        return self._collective(op, getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor,
                                (out, inp))

    def _reduce_scatter(self, op: Op, bd: Binding | None) -> OpImpl:
        dist = self.dist
        inp, out = self._full_and_piece(op, "rs", (bd.inp, bd.out) if bd is not None and bd.out is not None else None)
        return self._collective(op, getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor,
                                (out, inp))

    def _all_to_all(self, op: Op, bd: Binding | None) -> OpImpl:
        if op.splits is not None:
            return self._all_to_all_split(op)
        inp, dt2 = self._comm_buf("a2a_in", op.nbytes, torch_dtype(op.dtype, for_comm=True), len(op.group))
        out = self.buffer(("a2a_out",), (inp.numel(),), dt2)
        return self._collective(op, self.dist.all_to_all_single, (out, inp))

    def _all_to_all_split(self, op: Op) -> OpImpl:
        """An all_to_all with per-peer sizes (``op.splits``: bytes to and from each group member):
        ``all_to_all_single(out, inp, output_split_sizes, input_split_sizes)`` in elements of the op's dtype, or
        in bytes (uint8) where a size is not a whole number of elements."""
        send, recv = op.splits  # type: ignore[misc]
        dt = torch_dtype(op.dtype, for_comm=True)
        isz = dt.itemsize
        if any(int(x) % isz for x in (*send, *recv)):
            dt, isz = self.torch.uint8, 1
        ins, outs = [int(x) // isz for x in send], [int(x) // isz for x in recv]
        inp = self.buffer(("a2a_in_split", op.name), (max(1, sum(ins)),), dt)[:sum(ins)]
        out = self.buffer(("a2a_out_split", op.name), (max(1, sum(outs)),), dt)[:sum(outs)]
        impl = self._collective(op, self.dist.all_to_all_single, (out, inp), output_split_sizes=outs,
                                input_split_sizes=ins)
        impl.note += f", split sizes in {outs} out {ins} ({'bytes' if isz == 1 else dt})"
        return impl

    def _root(self, op: Op) -> int:
        """The root rank of a rooted collective (its group's first rank when it names none)."""
        return op.root if op.root is not None else op.group[0]

    def _broadcast(self, op: Op, bd: Binding | None) -> OpImpl:
        buf = self._comm_buf("bc", op.nbytes, torch_dtype(op.dtype, for_comm=True))[0]
        return self._collective(op, self.dist.broadcast, (buf,), src=self._root(op))

    def _reduce(self, op: Op, bd: Binding | None) -> OpImpl:
        buf = self._comm_buf("red", op.nbytes, torch_dtype(op.dtype, for_comm=True))[0]
        return self._collective(op, self.dist.reduce, (buf,), dst=self._root(op))

    def _pieces(self, op: Op, key: str) -> tuple[Any, list[Any] | None]:
        """A scatter's or gather's piece of ``op.nbytes`` / n and, on its root, the full buffer's n pieces."""
        n = len(op.group)
        full, dt2 = self._comm_buf(f"{key}_full", op.nbytes, torch_dtype(op.dtype, for_comm=True), n)
        piece = self.buffer((f"{key}_piece",), (full.numel() // n,), dt2)
        return piece, list(full.chunk(n)) if self.ctx.rank == self._root(op) else None

    def _scatter(self, op: Op, bd: Binding | None) -> OpImpl:
        return self._collective(op, self.dist.scatter, self._pieces(op, "sc"), src=self._root(op))

    def _gather(self, op: Op, bd: Binding | None) -> OpImpl:
        return self._collective(op, self.dist.gather, self._pieces(op, "ga"), dst=self._root(op))

    def _collective(self, op: Op, fn: Callable[..., Any], args: tuple[Any, ...], **kw: Any) -> OpImpl:
        """The op's torch.distributed call ``fn(*args, group=..., async_op=..., **kw)``, the bare call a script
        writes, on the op's group: async on gloo; on NCCL on the op's stream (``async_op=False`` where NCCL runs
        on the current stream, bound by :func:`script_call` for both loops, else ``async_op=True`` and
        ``work.wait()``)."""
        grp = self.ctx.groups.get(op.group)
        kind = op.kind
        call: Callable[[bool], Any] = lambda a: fn(*args, group=grp, async_op=a, **kw)  # noqa: E731
        if self.async_comm:
            return OpImpl(op, lambda: call(True), is_async=True, note=f"{kind} async on gloo")
        if self.nccl_current_stream:  # one bound call for both loops: the instrumented one times the same call
            bound = script_call(fn, args, {"group": grp, "async_op": False, **kw})
            return OpImpl(op, bound, note=f"{kind} async_op=False on the op's stream", fast=bound)

        def run_wait() -> None:
            w = call(True)
            if w is not None:
                w.wait()  # the current stream waits for NCCL's stream; the host does not block

        return OpImpl(op, run_wait, note=f"{kind} async_op=True + work.wait() (torch < 2.8)")

    def _send(self, op: Op, bd: Binding | None) -> OpImpl:
        return self._p2p(op, bd, self.dist.isend, "dst")

    def _recv(self, op: Op, bd: Binding | None) -> OpImpl:
        return self._p2p(op, bd, self.dist.irecv, "src")

    def _p2p(self, op: Op, bd: Binding | None, fn: Callable[..., Any], peer_arg: str) -> OpImpl:
        """A send's or recv's call ``fn(buf, <peer_arg>=peer)`` (``isend``/``dst``, ``irecv``/``src``), with
        ``group=`` its written process group (``Op.comm``, created by ``execute``) when it names one. A batched
        one is posted by :class:`executor.lean.BatchedP2P` on its batch's group instead."""
        tdt = torch_dtype(op.dtype, for_comm=True)
        buf = bd.inp if bd is not None and bd.inp is not None else self._comm_buf(op.kind, op.nbytes, tdt)[0]
        peer = int(op.peer)  # type: ignore[arg-type]
        tag = 0 if op.tag is None else (sum(ord(ch) * (i + 1) for i, ch in enumerate(op.tag)) % 30000) + 1
        kw: dict[str, Any] = {peer_arg: peer}
        if op.comm is not None and self.ctx.groups.get(op.comm) is not None:
            kw["group"] = self.ctx.groups[op.comm]
        p2p = (fn, buf, peer, tag if not self.ctx.cuda else 0)
        if not self.ctx.cuda:
            return OpImpl(op, lambda: fn(buf, tag=tag, **kw), is_async=True, note=f"{op.kind} async on gloo", p2p=p2p)
        grp = kw.get("group")

        def run() -> None:
            fn(buf, peer, grp).wait()  # the current stream waits for the p2p stream (dst / src, group by position)

        return OpImpl(op, run, note=f"NCCL {op.kind} + work.wait() on the op's stream", p2p=p2p)
