"""The stamp key (``stamp.key_file``): read once by each component that needs it.

The producers (the Python path, and the plugin through ``kaudit.stamp.key.file``, which
checks the file the same way in C) MAC every stamp with it; the consume job and the
re-reads verify the MACs (``schemas/stamp.py``, The stamp MAC). A key file is refused,
with the reason, when it cannot be read, holds fewer than 16 bytes (or more than 4096: a
key file holds a key), or is readable by others: a key anyone on the machine can read
lets anyone forge stamps. Its bytes are the key, as they are (a trailing newline too).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kafka_audit.errors import ConfigError
from kafka_audit.schemas.stamp import KEY_LENGTHS, StampMac

__all__ = ["read_key_file", "stamp_mac"]


def read_key_file(path: str | os.PathLike) -> bytes:
    """The key in ``path``; :class:`ConfigError` saying why it cannot be one."""
    path = Path(path)
    try:
        # O_NONBLOCK: a FIFO named here must not hang whoever reads it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"stamp.key_file {path} cannot be read: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"stamp.key_file {path} is not a regular file")
        if mode & stat.S_IROTH:
            raise ConfigError(f"stamp.key_file {path} is readable by others (mode "
                              f"{stat.S_IMODE(mode):o}): chmod o-r it; anyone who reads "
                              "the key can forge stamps")
        key = b""
        while len(key) <= KEY_LENGTHS[1] and (chunk := os.read(fd, KEY_LENGTHS[1] + 1)):
            key += chunk
    except OSError as exc:
        raise ConfigError(f"stamp.key_file {path} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if not KEY_LENGTHS[0] <= len(key) <= KEY_LENGTHS[1]:
        raise ConfigError(f"stamp.key_file {path} holds {len(key)}"
                          f"{'+' if len(key) > KEY_LENGTHS[1] else ''} bytes: a stamp key is "
                          f"{KEY_LENGTHS[0]}-{KEY_LENGTHS[1]} bytes (e.g. head -c 32 "
                          "/dev/urandom)")
    return key


def stamp_mac(settings) -> StampMac | None:
    """The stamp MAC under the configured key (None: no key, no MACs); reads the file."""
    path = settings.stamp.key_file
    return None if path is None else StampMac(read_key_file(path))
