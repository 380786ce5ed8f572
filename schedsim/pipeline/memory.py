"""Static memory of pipeline stages: parameters, gradients and optimizer state, with the embedding and
LM head placed on the stages that hold them.

Per parameter, mixed-precision training with Adam keeps 16 bytes: the 16-bit weight (2) and gradient (2),
and the fp32 master weight, momentum and variance (4 + 4 + 4) -- Rajbhandari et al., "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", SC'20 (arXiv 1910.02054) §3.1, "2Ψ + 2Ψ + KΨ"
with K = 12. fp32 training also comes to 16 (4 + 4 + 8).

Parameters of a GPT layer (Megatron-LM, TP = 1): attention QKV and projection ``4h² + 4h`` (weights and
biases), MLP ``h·f1 + f·h`` (f1 = 2f with SwiGLU) and two LayerNorms; see
:func:`schedsim.spec.pipeline_block._params_per_layer`. The first stage holds the word embedding
``V·h`` and learned position embedding ``s·h``; the last stage holds the final LayerNorm ``2h`` and
the output layer ``V·h`` -- its own weight when untied, a copy of the word embedding when tied
(Megatron keeps that copy on the last pipeline stage and all-reduces its gradient). So with a V
placement (ZB-V, DualPipeV) rank 0 holds both the embedding and the LM head, and with a loop
placement (1F1B, ZB-H1) they sit on the first and the last rank.

Activations are not here: they depend on the schedule's timing (``pipeline_metrics``), at
``s·b·h·(34 + 5·a·s/h)`` bytes per layer and microbatch (Korthikanti et al. 2022, arXiv 2205.05198).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from schedsim.graph.info import StaticMemory

__all__ = ["BYTES_PER_PARAM", "static_memory"]

BYTES_PER_PARAM = 16
"""Mixed-precision Adam: 2 (weight) + 2 (gradient) + 12 (fp32 master, momentum, variance); ZeRO §3.1."""


def static_memory(params: Mapping[int, Mapping[str, int]], stage_to_rank: Mapping[int, int] | Callable[[int], int],
                  bytes_per_param: int = BYTES_PER_PARAM) -> StaticMemory:
    """Per-rank parameters and static bytes (weights, gradients, optimizer state).

    Parameters
    ----------
    params : Mapping[int, Mapping[str, int]]
        Stage → parameter counts (:func:`schedsim.spec.pipeline_block.stage_params`).
    stage_to_rank : Mapping[int, int] or callable
        Stage → rank.
    bytes_per_param : int
        Static bytes per parameter (default :data:`BYTES_PER_PARAM`).

    Returns
    -------
    StaticMemory
        ``params`` rank -> parameter count, ``bytes`` rank -> params × ``bytes_per_param``,
        ``breakdown`` rank -> {"layers", "embedding", "lm_head"} parameter counts,
        ``bytes_per_param`` and ``source``.
    """
    where = stage_to_rank if callable(stage_to_rank) else stage_to_rank.__getitem__
    breakdown: dict[int, dict[str, int]] = {}
    for s, d in params.items():
        b = breakdown.setdefault(where(s), {"layers": 0, "embedding": 0, "lm_head": 0})
        for k, n in d.items():
            b[k] += n
    ranks = sorted(breakdown)
    total = {r: sum(breakdown[r].values()) for r in ranks}
    return StaticMemory(params=total, bytes={r: total[r] * bytes_per_param for r in ranks}, breakdown=breakdown,
                        bytes_per_param=bytes_per_param,
                        source="16 B/param mixed-precision Adam (Rajbhandari et al. 2020, ZeRO §3.1)")
