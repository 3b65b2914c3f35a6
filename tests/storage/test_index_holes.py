"""An index left pre-sized by an unclean shutdown (a sparse file past its entries) is opened without
mapping the hole: reading a hole through a shared mapping allocates a page, which on a full tmpfs
kills the process with SIGBUS instead of raising an error the log dir's failure handling reports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grete.storage.index import IndexError_, OffsetIndex


def test_the_hole_of_a_pre_sized_index_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 10 * 1024 * 1024, writable=True)
    for n in range(1, 4):
        index.append(n * 10, n * 4096)
    index.close(trim=False)  # as a SIGKILL leaves it: the full pre-allocated size, mostly a hole
    assert path.stat().st_size == 10 * 1024 * 1024
    if os.lseek(os.open(path, os.O_RDONLY), 0, os.SEEK_HOLE) == path.stat().st_size:
        return  # this file system keeps no holes: nothing to skip
    reopened = OffsetIndex(path, 0, 10 * 1024 * 1024, writable=False)
    try:
        assert 3 <= reopened.entries <= 64 * 1024 // 8  # the written block(s), not 10 MB of hole
        # the written block's zeros after the entries end it badly: the sanity check sends it to be
        # rebuilt from the log, as after any unclean shutdown
        with pytest.raises(IndexError_):
            reopened.sanity_check(log_size=1 << 20)
    finally:
        reopened.close()
