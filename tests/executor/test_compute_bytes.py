"""What ``schedsim execute`` runs for a ``compute`` op given only ``bytes``: an elementwise kernel (S0's
``output_chunk.add_``) moving exactly those bytes, two tensors read and one written, on the op's own buffers.
Until 2026-12-02 it was ``dst.copy_(src)``, which CUDA runs as a "Memcpy DtoD" rather than as a kernel on the
SMs, so it did not queue for SMs behind other streams' GEMMs as the model's memory-bound kernel does."""

from __future__ import annotations

import torch

from executor.dist import DistContext
from executor.kernels import Materializer
from schedsim.graph.build import build_graph
from schedsim.spec.loader import load_schedule


def _op(text: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.yaml"
        p.write_text(text)
        g = build_graph(load_schedule(p))
    return next(data["op"] for _, data in g.nodes(data=True) if data["op"].name == "add")


def test_bytes_only_compute_is_an_elementwise_add_of_its_bytes():
    op = _op("schema_version: 1\nname: s\nworld_size: 1\nops:\n  - {name: add, kind: compute, bytes: 3000}\n")
    mat = Materializer(DistContext(rank=0, world=1, local_rank=0, backend="gloo", device=torch.device("cpu"),
                                   cuda=False))
    impl = mat.make(op)
    a, b, c = impl.tensors
    assert [t.numel() * t.element_size() for t in (a, b, c)] == [1000, 1000, 1000]  # 2 read + 1 written = bytes
    assert len({t.data_ptr() for t in (a, b, c)}) == 3
    a.fill_(2)
    b.fill_(5)
    impl.run()
    assert torch.equal(c, torch.full_like(c, 7))  # c = a + b
    c.zero_()
    impl.fast()
    assert torch.equal(c, torch.full_like(c, 7))  # the lean loop's call does the same
    assert impl.note.startswith("elementwise add moving 3e+03 B")
