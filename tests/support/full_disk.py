"""A disk that fills up: a real tmpfs of a few KiB, mounted for a test (as root, as the
fault tests are), and a file that fills it to its last byte."""

import errno
import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k,mode=0700", "tmpfs", str(disk)],
                   check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk refuses another byte (ENOSPC); returns it."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler
