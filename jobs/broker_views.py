"""Each broker's own view of who leads a partition, asked of that broker alone.

A librdkafka client answers ``list_topics`` from whichever broker it picks, so the
watcher sees the cluster as one broker sees it. A broker cut off from the controller
quorum keeps its last view: it still names itself leader, at the old leader epoch,
while the quorum has elected another broker at a newer one, and the producers that
still reach it still get acknowledgements. Asking every broker separately shows both:
two brokers each naming itself leader of one partition is a split brain, observed.

This module speaks Kafka's Metadata API (key 3, version 8: the last before the
flexible encoding; brokers from 4.0 on accept 4 and up) over one TCP connection per
broker: :func:`encode_request` and :func:`decode_response` are pure, :func:`ask` does
one round trip. PLAINTEXT only: over TLS or SASL the watcher keeps its one view and
says so once (``jobs/watcher.py``).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

__all__ = ["BrokerView", "encode_request", "decode_response", "ask", "freshest", "claimants"]

API_METADATA = 3
VERSION = 8


@dataclass(frozen=True)
class BrokerView:
    """One partition as one broker sees it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_request(correlation_id: int, client_id: str, topics: list[str] | None) -> bytes:
    """A size-framed Metadata v8 request for ``topics`` (None: every topic; header v1)."""
    body = struct.pack(">hhi", API_METADATA, VERSION, correlation_id) + _string(client_id)
    if topics is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics)
    body += struct.pack(">bbb", 0, 0, 0)  # no auto-creation, no authorized operations
    return struct.pack(">i", len(body)) + body


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ValueError("metadata response ends early")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values if len(values) > 1 else values[0]

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s

    def array(self, item) -> list:
        n = self.take(">i")
        return [item() for _ in range(max(n, 0))]


def decode_response(data: bytes, correlation_id: int
                    ) -> tuple[dict[int, tuple[str, int]], dict[tuple[str, int], BrokerView]]:
    """(brokers: id -> (host, port), partitions: (topic, partition) -> view) of a Metadata
    v8 response body (after its size); a ``ValueError`` if it is not the answer asked for."""
    r = _Reader(data)
    if r.take(">i") != correlation_id:
        raise ValueError("metadata response to another request")
    r.take(">i")  # throttle_time_ms
    brokers = {}
    for _ in range(max(r.take(">i"), 0)):
        node, host, port = r.take(">i"), r.string(), r.take(">i")
        r.string()  # rack
        brokers[node] = (host or "", port)
    r.string()  # cluster_id
    r.take(">i")  # controller_id (a random live broker on KRaft)
    views: dict[tuple[str, int], BrokerView] = {}
    for _ in range(max(r.take(">i"), 0)):
        error, name = r.take(">h"), r.string()
        r.take(">b")  # is_internal
        for _ in range(max(r.take(">i"), 0)):
            p_error, index, leader, epoch = r.take(">hiii")
            replicas = tuple(r.array(lambda: r.take(">i")))
            isr = tuple(r.array(lambda: r.take(">i")))
            r.array(lambda: r.take(">i"))  # offline replicas
            if error == 0 and p_error in (0, 9) and name is not None:  # 9: replica unavailable
                views[(name, index)] = BrokerView(leader, epoch, tuple(sorted(isr)), replicas)
        r.take(">i")  # topic_authorized_operations
    return brokers, views


def ask(host: str, port: int, topics: list[str] | None, timeout: float,
        correlation_id: int = 1
        ) -> tuple[dict[int, tuple[str, int]], dict[tuple[str, int], BrokerView]]:
    """One broker's metadata for ``topics``, in ``timeout`` seconds or an ``OSError``."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(encode_request(correlation_id, "kafka-audit-watcher", topics))
        size = struct.unpack(">i", _recv(s, 4))[0]
        return decode_response(_recv(s, size), correlation_id)


def _recv(s: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = s.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def freshest(views: dict[int, dict[tuple[str, int], BrokerView]]
             ) -> dict[tuple[str, int], BrokerView]:
    """Per partition, the view to believe (pure): the newest leader epoch; at one epoch
    the leader's own answer (a broker cut off keeps an old ISR at the same epoch: ISR
    changes do not bump it), else the view most brokers give, else the lowest broker's."""
    by_key: dict[tuple[str, int], list[tuple[int, BrokerView]]] = {}
    for b, answer in views.items():
        for key, v in answer.items():
            by_key.setdefault(key, []).append((b, v))
    out = {}
    for key, seen in by_key.items():
        top = max(v.leader_epoch for _b, v in seen)
        newest = sorted((b, v) for b, v in seen if v.leader_epoch == top)
        own = [v for b, v in newest if v.leader == b]
        if own:
            out[key] = own[0]
            continue
        votes = [v for _b, v in newest]
        out[key] = max(votes, key=lambda v: (votes.count(v), -votes.index(v)))
    return out


def claimants(views: dict[int, dict[tuple[str, int], BrokerView]], key: tuple[str, int]
              ) -> dict[int, int]:
    """Broker -> leader epoch of every broker that names itself leader of ``key`` (pure).
    Two or more: two brokers act as leader at once."""
    return {b: v[key].leader_epoch for b, v in views.items()
            if key in v and v[key].leader == b}
