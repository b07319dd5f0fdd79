"""OffsetForLeaderEpoch v3 (key 23): the request's bytes and the answer's decoding."""

import struct

import pytest

from kafka_audit.jobs.watcher.broker_views import (
    EpochEndAnswer,
    decode_epoch_ends,
    encode_epoch_ends,
)


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_the_request_asks_each_partition_for_its_epoch_unfenced():
    req = encode_epoch_ends(9, "me", {("b", 1): 4, ("a", 0): 7, ("b", 0): 3})
    size, key, version, cid = struct.unpack_from(">ihhi", req)
    assert (size, key, version, cid) == (len(req) - 4, 23, 3, 9)
    body = req[4 + 8 + 2 + 2:]
    assert body == (struct.pack(">ii", -1, 2)
                    + _s("a") + struct.pack(">i", 1) + struct.pack(">iii", 0, -1, 7)
                    + _s("b") + struct.pack(">i", 2) + struct.pack(">iii", 0, -1, 3)
                    + struct.pack(">iii", 1, -1, 4))


def test_the_answer_gives_each_partitions_epoch_end_or_its_error():
    body = (struct.pack(">iii", 9, 0, 1) + _s("t") + struct.pack(">i", 2)
            + struct.pack(">hiiq", 0, 0, 7, 1234) + struct.pack(">hiiq", 6, 1, -1, -1))
    assert decode_epoch_ends(body, 9) == {("t", 0): EpochEndAnswer(0, 7, 1234),
                                          ("t", 1): EpochEndAnswer(6, -1, -1)}
    with pytest.raises(ValueError, match="another request"):
        decode_epoch_ends(body, 8)
    with pytest.raises(ValueError, match="ends early"):
        decode_epoch_ends(body[:-3], 9)
