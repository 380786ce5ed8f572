"""One CUDA stream per schedule stream, none shared (``schedsim execute``).

``torch.cuda.Stream()`` takes streams from a per-device pool of 32 per priority, handed out round robin
(PyTorch PR 9938; ``c10/cuda/CUDAStream.h``, ``kStreamsPerPool``): the 33rd stream a process asks for is the
first again, so two schedule streams would run as one (a false dependency the schedule does not have) and the
executor's per-stream end events collide. :func:`cuda_streams` takes pool streams while they are distinct and
creates the rest with ``cudaStreamCreateWithFlags(cudaStreamNonBlocking)``, the flag the pool's streams carry,
wrapped in ``torch.cuda.ExternalStream``. ``cudaStreamCreateWithFlags`` is called through ctypes in the
``libcudart`` the process has loaded (``/proc/self/maps``); where that is not found, the shared streams stay and
a note says so.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

#: the name :class:`executor.runtime.CudaRunner` gives its timing anchor stream among the schedule's streams
ANCHOR = "\x00anchor"
#: cudaStreamNonBlocking (CUDA runtime API, cudaStreamCreateWithFlags)
NON_BLOCKING = 1


def _loaded_cudart(maps: str = "/proc/self/maps") -> list[str]:
    """Paths of the ``libcudart`` shared objects mapped into this process (none when unreadable)."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            return sorted({line.split()[-1] for line in f if "/libcudart.so" in line})
    except OSError:
        return []


def stream_creator(paths: Sequence[str] | None = None) -> Callable[[], int] | None:
    """A function that creates a non-blocking CUDA stream on the current device and returns its handle (an
    int), from the first loadable ``libcudart`` among ``paths`` (default: those this process has loaded);
    None when there is none or it lacks ``cudaStreamCreateWithFlags``."""
    for p in _loaded_cudart() if paths is None else paths:
        try:
            fn = ctypes.CDLL(p).cudaStreamCreateWithFlags
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
        fn.restype = ctypes.c_int

        def create(fn: Any = fn) -> int:
            handle = ctypes.c_void_p()
            err = fn(ctypes.byref(handle), NON_BLOCKING)
            if err != 0 or not handle.value:
                raise RuntimeError(f"cudaStreamCreateWithFlags returned CUDA error {err}")
            return int(handle.value)

        return create
    return None


def cuda_streams(torch: Any, dev: Any, names: Sequence[str],
                 creator: Callable[[], Callable[[], int] | None] = stream_creator) -> tuple[dict[str, Any], str]:
    """``({name: torch.cuda.Stream}, note)``: one stream per name on device ``dev``, no two the same CUDA stream.

    Pool streams first; a name whose pool stream is already taken by an earlier name gets a stream of its own
    (``creator()`` makes it). ``note`` is "" when every name has its own stream, else a warning line naming
    the streams that share one (no ``libcudart`` found, or creating a stream failed).
    """
    streams = {s: torch.cuda.Stream(device=dev) for s in names}
    owner: dict[int, str] = {}
    clash = [s for s in names if owner.setdefault(int(streams[s].cuda_stream), s) != s]
    if not clash:
        return streams, ""
    create = creator()
    if create is not None:
        try:
            with torch.cuda.device(dev):
                for s in clash:
                    streams[s] = torch.cuda.ExternalStream(create(), device=dev)
            return streams, ""
        except RuntimeError as e:
            why = str(e)
    else:
        why = "no libcudart found in this process to create streams outside the pool"
    shown = ", ".join(repr(s) for s in clash[:6]) + (" ..." if len(clash) > 6 else "")
    return streams, (f"warning: {len(names)} streams on this rank exceed PyTorch's pool of 32 CUDA streams and {why}: "
                     f"{shown} share a CUDA stream with an earlier stream, so their ops run in one order (the "
                     "prediction does not know this)")
