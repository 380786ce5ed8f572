"""Units and data types.

Internally every quantity is an SI float: seconds, bytes, FLOP, FLOP/s,
bytes/s. YAML keys carry their unit as a suffix (``latency_us``,
``bandwidth_GBps``) and are converted once, at load. GB means 1e9 bytes, as in
nccl-tests (``doc/PERFORMANCE.md``).
"""

from __future__ import annotations

from schedsim.kinds import DTYPES

__all__ = ["DTYPE_BYTES", "DTYPES", "dtype_bytes", "GB", "US", "MS", "TFLOPS", "MAX_DIM", "MAX_BYTES", "MAX_FLOPS",
           "MAX_DURATION_US", "MAX_REPEAT"]

GB = 1e9
"""Bytes per GB (decimal, the nccl-tests convention)."""
US = 1e-6
MS = 1e-3
TFLOPS = 1e12

# Sanity bounds of the sizes a schedule may ask for, checked by the spec (issue 12: a huge `m` overflowed the FLOP
# count to a traceback, `repeat: 10**12` hung the simulator). Each is far past any real kernel: a 2**40 GEMM
# dimension is 4 TiB of fp32 per row/column vector, 1 EiB is 10^4 times the HBM of a 8-GPU node, 10^30 FLOP is
# ~10^12 GPU-days, 10^12 µs is 11.6 days (the Kineto reader's bound for an absurd event time), and 10^6 repeats is
# 10^3 times the layers of any model.
MAX_DIM = 2**40
MAX_BYTES = 2**60
MAX_FLOPS = 1e30
MAX_DURATION_US = 1e12
MAX_REPEAT = 1_000_000

#: Bytes per element. ``tf32`` is stored as fp32; it only changes GEMM rates.
DTYPE_BYTES: dict[str, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "int8": 1,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
}
assert tuple(DTYPE_BYTES) == DTYPES, "DTYPE_BYTES lists the dtypes of schedsim.kinds.DType, in order"


def dtype_bytes(dtype: str) -> int:
    """Return the element size of ``dtype`` in bytes.

    Raises
    ------
    KeyError
        If ``dtype`` is not one of :data:`DTYPES`.
    """
    return DTYPE_BYTES[dtype]
