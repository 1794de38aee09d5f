"""``retain_freed_memory``: a freed large block is reused without faulting its pages in again."""

from __future__ import annotations

import ctypes
import os
import resource
import sys

import numpy as np
import pyarrow as pa
import pytest

from pipelines.runner import retain_freed_memory

SIZE_BYTES = 64 << 20


def _faults_to_fill_a_fresh_block(libc) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(SIZE_BYTES)
    assert block
    ctypes.memset(block, 1, SIZE_BYTES)
    libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_a_block_freed_and_allocated_again_does_not_fault_again():
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    assert retain_freed_memory()
    _faults_to_fill_a_fresh_block(libc)  # the first fill faults its pages in (or reuses earlier ones)
    pages = SIZE_BYTES // resource.getpagesize()
    assert _faults_to_fill_a_fresh_block(libc) < pages // 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_arrow_allocates_from_glibc_once_freed_memory_is_kept():
    """Arrow's default pool (mimalloc) would decommit freed pages between batches; after
    ``retain_freed_memory`` Arrow allocates through glibc (its system pool), and worker processes
    started from here are told so."""
    assert retain_freed_memory()
    assert pa.default_memory_pool().backend_name == "system"
    assert os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system"
    table = pa.table({"x": pa.array(np.arange(1 << 20))})
    assert table.column("x").to_numpy()[-1] == (1 << 20) - 1
