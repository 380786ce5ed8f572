"""executor.streams: one CUDA stream per schedule stream even past PyTorch's pool of 32 (fakes of torch.cuda)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

from executor.streams import _loaded_cudart, cuda_streams, stream_creator


class _Pool:
    """torch.cuda as far as cuda_streams uses it: Stream() round robin over `size` handles, ExternalStream."""

    def __init__(self, size: int = 32) -> None:
        self.size, self.n = size, 0
        self.cuda = SimpleNamespace(Stream=self.stream, ExternalStream=self.external,
                                    device=lambda d: contextlib.nullcontext())

    def stream(self, device=None):  # type: ignore[no-untyped-def]
        self.n += 1
        return SimpleNamespace(cuda_stream=1000 + (self.n - 1) % self.size, external=False)

    def external(self, ptr, device=None):  # type: ignore[no-untyped-def]
        return SimpleNamespace(cuda_stream=ptr, external=True)


def test_pool_streams_while_they_are_distinct():
    streams, note = cuda_streams(_Pool(), "cuda:0", [f"s{i}" for i in range(32)])
    assert note == "" and len({s.cuda_stream for s in streams.values()}) == 32
    assert not any(s.external for s in streams.values())


def test_names_past_the_pool_get_streams_of_their_own():
    made = iter(range(5000, 5100))
    names = [f"s{i}" for i in range(33)] + ["anchor"]  # matmul_streams chunks 32: 32 streams, zero_out's, anchor
    streams, note = cuda_streams(_Pool(), "cuda:0", names, creator=lambda: lambda: next(made))
    assert note == "" and len({s.cuda_stream for s in streams.values()}) == 34
    assert [n for n, s in streams.items() if s.external] == ["s32", "anchor"]  # the 33rd and 34th of the pool


def test_without_libcudart_the_shared_streams_stay_and_the_note_says_which():
    streams, note = cuda_streams(_Pool(4), "cuda:0", ["a", "b", "c", "d", "e", "f"], creator=lambda: None)
    assert streams["e"].cuda_stream == streams["a"].cuda_stream
    assert note.startswith("warning: 6 streams") and "'e', 'f' share a CUDA stream" in note


def test_a_failed_create_keeps_the_pool_streams_with_the_error_in_the_note():
    def create() -> int:
        raise RuntimeError("cudaStreamCreateWithFlags returned CUDA error 2")

    _, note = cuda_streams(_Pool(1), "cuda:0", ["a", "b"], creator=lambda: create)
    assert "CUDA error 2" in note and "'b' share" in note


def test_loaded_cudart_reads_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /opt/venv/nvidia/cu13/lib/libcudart.so.13\n"
                    "7f02-7f03 r-xp 0 08:01 2 /usr/lib/libc.so.6\n"
                    "7f04-7f05 r--p 0 08:01 1 /opt/venv/nvidia/cu13/lib/libcudart.so.13\n")
    assert _loaded_cudart(str(maps)) == ["/opt/venv/nvidia/cu13/lib/libcudart.so.13"]
    assert _loaded_cudart(str(tmp_path / "none")) == []
    assert stream_creator([str(tmp_path / "missing.so")]) is None  # not loadable: no creator
