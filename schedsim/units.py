"""Units and data types.

Internally every quantity is an SI float: seconds, bytes, FLOP, FLOP/s,
bytes/s. YAML keys carry their unit as a suffix (``latency_us``,
``bandwidth_GBps``) and are converted once, at load. GB means 1e9 bytes, as in
nccl-tests (``doc/PERFORMANCE.md``).
"""

from __future__ import annotations

from schedsim.kinds import DTYPES

__all__ = ["DTYPE_BYTES", "DTYPES", "dtype_bytes", "GB", "US", "MS", "TFLOPS"]

GB = 1e9
"""Bytes per GB (decimal, the nccl-tests convention)."""
US = 1e-6
MS = 1e-3
TFLOPS = 1e12

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
