"""The stamp key file (``stamp.key_file``): refused, with the reason, unless it can be a key."""

import os
import re

import pytest

from kafka_audit.errors import ConfigError
from kafka_audit.schemas.stamp import StampMac
from kafka_audit.settings import Settings
from kafka_audit.stamp_key import read_key_file, stamp_mac


def key_file(tmp_path, data: bytes, mode: int = 0o600):
    path = tmp_path / "stamp.key"
    path.write_bytes(data)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o640])
def test_a_key_file_is_read_as_it_is(tmp_path, mode):
    path = key_file(tmp_path, b"0123456789abcdef\n", mode)
    assert read_key_file(path) == b"0123456789abcdef\n"  # the newline is part of the key
    mac = stamp_mac(Settings(home=tmp_path, stamp={"key_file": str(path)}))
    assert isinstance(mac, StampMac) and mac.key == b"0123456789abcdef\n"
    assert stamp_mac(Settings(home=tmp_path)) is None  # no key: no MACs


@pytest.mark.parametrize("data, mode, says", [
    (b"short", 0o600, "holds 5 bytes: a stamp key is 16-4096 bytes"),
    (b"", 0o600, "holds 0 bytes"),
    (b"k" * 4097, 0o600, "holds 4097+ bytes"),
    (b"k" * 32, 0o604, "is readable by others (mode 604): chmod o-r it"),
    (b"k" * 32, 0o644, "is readable by others"),
])
def test_a_key_file_that_cannot_be_a_key_is_refused_with_the_reason(tmp_path, data, mode,
                                                                    says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        read_key_file(key_file(tmp_path, data, mode))


def test_a_missing_or_unreadable_key_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="stamp.key_file .*missing cannot be read: No such"):
        read_key_file(tmp_path / "missing")
    with pytest.raises(ConfigError, match="is not a regular file"):
        read_key_file(tmp_path)
    os.mkfifo(tmp_path / "fifo", 0o600)
    with pytest.raises(ConfigError, match="is not a regular file"):  # and no hang on it
        read_key_file(tmp_path / "fifo")
    if os.geteuid() != 0:  # root reads a file whatever its mode
        with pytest.raises(ConfigError, match="cannot be read: Permission denied"):
            read_key_file(key_file(tmp_path, b"k" * 32, 0o000))
