"""After a compressing prefill the freed heap pages go back to the system (glibc's ``malloc_trim``), where there is
glibc; elsewhere the call says it did nothing."""

from __future__ import annotations

import sys

import psutil
import pytest

from snapkv_cli.generation import allocator

glibc = pytest.mark.skipif(allocator._libc() is None, reason="glibc's malloc_trim is Linux with glibc only")


@glibc
def test_freed_heap_pages_go_back_to_the_system():
    """128 MiB of 64 KiB blocks (heap, not mmap), nine in ten freed with the tenth kept between them, so glibc cannot
    give them back by shrinking the heap's top: resident memory falls by most of the freed 115 MiB only once asked."""
    process = psutil.Process()
    blocks = [bytearray(b"x" * (64 * 1024)) for _ in range(2048)]
    kept = blocks[::10]
    del blocks
    before = process.memory_info().rss
    assert allocator.return_freed_memory_to_os() is True
    freed = before - process.memory_info().rss
    assert freed > 64 * 2**20, f"only {freed / 2**20:.0f} MiB went back"
    assert len(kept) == 205


def test_without_glibc_nothing_is_done_and_the_caller_is_told(monkeypatch):
    allocator._libc.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert allocator._libc() is None and allocator.return_freed_memory_to_os() is False
    finally:
        allocator._libc.cache_clear()
