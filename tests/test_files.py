"""Durable appends: the RWF_DSYNC write and its write + fdatasync fallback."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from greenroom import _files
from greenroom._files import append_durably, open_for_append

needs_rwf_dsync = pytest.mark.skipif(not hasattr(os, "RWF_DSYNC"), reason="RWF_DSYNC is Linux-only")


def _append_all(path: Path, chunks: list[bytes]) -> bytes:
    fd = open_for_append(path)
    try:
        for chunk in chunks:
            append_durably(fd, chunk)
    finally:
        os.close(fd)
    return path.read_bytes()


@needs_rwf_dsync
def test_dsync_writes_append_in_order(tmp_path: Path) -> None:
    assert _files._RWF_DSYNC == os.RWF_DSYNC  # the Linux path is the one in use
    chunks = [b"first\n", b"x" * 300_000 + b"\n", b"", b"last\n"]
    assert _append_all(tmp_path / "log", chunks) == b"".join(chunks)
    assert _files._RWF_DSYNC == os.RWF_DSYNC


@needs_rwf_dsync
def test_a_refused_flag_falls_back_to_fdatasync_without_writing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel refuses a flag it does not know (EOPNOTSUPP), as an old kernel or an
    unsupported file system refuses RWF_DSYNC: nothing is written by the refused call,
    the data goes through write + fdatasync once, and later appends skip the flag."""
    monkeypatch.setattr(_files, "_RWF_DSYNC", 1 << 30)  # no such RWF_* flag
    path = tmp_path / "log"
    path.write_bytes(b"kept\n")
    assert _append_all(path, [b"one\n", b"two\n"]) == b"kept\none\ntwo\n"
    assert _files._RWF_DSYNC is None


def test_write_errors_other_than_a_refusal_are_raised(tmp_path: Path) -> None:
    flags = _files._RWF_DSYNC
    fd = os.open(tmp_path / "read-only", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as raised:
            append_durably(fd, b"nope\n")
    finally:
        os.close(fd)
    assert raised.value.errno == errno.EBADF  # not open for writing
    assert (tmp_path / "read-only").read_bytes() == b""
    assert flags == _files._RWF_DSYNC  # a real failure does not turn the fast path off
