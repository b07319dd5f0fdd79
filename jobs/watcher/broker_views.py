"""Each broker's own view of who leads a partition, asked of that broker alone.

A librdkafka client answers ``list_topics`` from whichever broker it picks, so the
watcher sees the cluster as one broker sees it. A broker cut off from the controller
quorum keeps its last view: it still names itself leader, at the old leader epoch,
while the quorum has elected another broker at a newer one, and the producers that
still reach it still get acknowledgements. Asking every broker separately shows both:
two brokers each naming itself leader of one partition is a split brain, observed.

This module speaks Kafka's Metadata API (key 3, version 8: the last before the
flexible encoding; brokers from 4.0 on accept 4 and up) and OffsetForLeaderEpoch (key
23, version 3: where a leader epoch ends in a broker's log, the answer a follower
truncates by) over one connection per question: the encoders and decoders are pure,
:func:`ask` and :func:`epoch_ends` do one round trip each. Over the profile's security
(:class:`Security`): TLS with the profile's CA, client certificate and host-name check
(Python's ``ssl``), then SASL (``SaslHandshake`` v1 and ``SaslAuthenticate`` v1, keys
17 and 36): PLAIN, or SCRAM-SHA-256/512 with the ``scramp`` library's client. The
watcher asks each broker once a poll, within its lookup budget.
"""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass

__all__ = ["BrokerView", "Security", "security_for", "encode_request", "decode_response",
           "ask", "EpochEndAnswer", "encode_epoch_ends", "decode_epoch_ends", "epoch_ends",
           "freshest", "claimants", "encode_sasl_handshake", "decode_sasl_handshake",
           "encode_sasl_authenticate", "decode_sasl_authenticate"]

API_METADATA = 3
VERSION = 8
#: OffsetForLeaderEpoch (KIP-101, KIP-320): version 3, the last before the flexible encoding
#: (Kafka 4.0 dropped 0 and 1: KIP-896)
API_EPOCH_END, EPOCH_END_VERSION = 23, 3
API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE = 17, 36
CLIENT_ID = "kafka-audit-watcher"


@dataclass(frozen=True)
class Security:
    """How a connection to one broker is made: ``tls`` wraps it (None: plain TCP);
    ``sasl`` is (mechanism, user, password) to authenticate with (None: none)."""

    tls: ssl.SSLContext | None = None
    sasl: tuple[str, str, str] | None = None

    def __repr__(self) -> str:  # never the password
        return f"Security(tls={self.tls is not None}, sasl={self.sasl and self.sasl[:2]})"


def security_for(profile) -> Security:
    """The profile's security as :class:`Security` (reads its secrets: files, variables)."""
    tls = None
    if profile.uses_tls:
        t = profile.tls
        tls = ssl.create_default_context(cafile=str(t.ca_file) if t.ca_file else None)
        tls.check_hostname = t.verify_hostname
        if t.cert_file is not None:
            tls.load_cert_chain(str(t.cert_file), str(t.key_file), password=t.key_secret())
    sasl = None
    if profile.sasl is not None:
        sasl = (profile.sasl.mechanism, profile.sasl.username, profile.sasl.secret())
    return Security(tls, sasl)


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


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def _framed(api_key: int, version: int, correlation_id: int, client_id: str,
            body: bytes) -> bytes:
    """A size-framed request with header v1 (key, version, correlation id, client id)."""
    out = struct.pack(">hhi", api_key, version, correlation_id) + _string(client_id) + body
    return struct.pack(">i", len(out)) + out


def encode_request(correlation_id: int, client_id: str, topics: list[str] | None) -> bytes:
    """A size-framed Metadata v8 request for ``topics`` (None: every topic; header v1)."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics)
    body += struct.pack(">bbb", 0, 0, 0)  # no auto-creation, no authorized operations
    return _framed(API_METADATA, VERSION, correlation_id, client_id, body)


@dataclass(frozen=True)
class EpochEndAnswer:
    """A leader's answer to "where does epoch E end in your log" (OffsetForLeaderEpoch):
    the largest epoch at or below E that its log has, and the offset where that epoch ends
    (the next epoch's first offset, or the log end if it is the newest); ``error`` a Kafka
    error code (0: none; 6: not the leader)."""

    error: int
    leader_epoch: int
    end_offset: int


def encode_epoch_ends(correlation_id: int, client_id: str,
                      wanted: dict[tuple[str, int], int]) -> bytes:
    """A size-framed OffsetForLeaderEpoch v3 request: for each (topic, partition), the end
    of ``wanted``'s epoch in the log of the broker asked (no fencing on its current epoch)."""
    topics: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), epoch in sorted(wanted.items()):
        topics.setdefault(topic, []).append((partition, epoch))
    body = struct.pack(">ii", -1, len(topics))  # replica id -1: not a follower
    for topic, parts in topics.items():
        body += _string(topic) + struct.pack(">i", len(parts))
        body += b"".join(struct.pack(">iii", p, -1, e) for p, e in parts)
    return _framed(API_EPOCH_END, EPOCH_END_VERSION, correlation_id, client_id, body)


def decode_epoch_ends(data: bytes, correlation_id: int
                      ) -> dict[tuple[str, int], EpochEndAnswer]:
    """(topic, partition) -> :class:`EpochEndAnswer` of an OffsetForLeaderEpoch v3 response body."""
    r = _Reader.answer(data, correlation_id, "epoch end")
    out = {}
    for _ in range(max(r.take(">i"), 0)):
        topic = r.string() or ""
        for _ in range(max(r.take(">i"), 0)):
            error, partition, epoch, end = r.take(">hiiq")
            out[(topic, partition)] = EpochEndAnswer(error, epoch, end)
    return out


def epoch_ends(host: str, port: int, wanted: dict[tuple[str, int], int], timeout: float,
               correlation_id: int = 1, security: Security | None = None
               ) -> dict[tuple[str, int], EpochEndAnswer]:
    """Ask one broker (the partitions' leader: another answers error 6) where each wanted
    epoch ends in its log, in ``timeout`` seconds or an ``OSError``."""
    return _round_trip(host, port, encode_epoch_ends(correlation_id, CLIENT_ID, wanted),
                       lambda data: decode_epoch_ends(data, correlation_id), timeout,
                       security)


def encode_sasl_handshake(correlation_id: int, client_id: str, mechanism: str) -> bytes:
    """A size-framed SaslHandshake v1 request (then SaslAuthenticate carries the tokens)."""
    return _framed(API_SASL_HANDSHAKE, 1, correlation_id, client_id, _string(mechanism))


def decode_sasl_handshake(data: bytes, correlation_id: int) -> tuple[int, list[str]]:
    """(error code, the mechanisms the broker has enabled) of a SaslHandshake v1 answer."""
    r = _Reader(data)
    if r.take(">i") != correlation_id:
        raise ValueError("SASL handshake response to another request")
    return r.take(">h"), [m or "" for m in r.array(r.string)]


def encode_sasl_authenticate(correlation_id: int, client_id: str, token: bytes) -> bytes:
    """A size-framed SaslAuthenticate v1 request carrying ``token``."""
    return _framed(API_SASL_AUTHENTICATE, 1, correlation_id, client_id, _bytes(token))


def decode_sasl_authenticate(data: bytes, correlation_id: int
                             ) -> tuple[int, str | None, bytes]:
    """(error code, error message, the server's token) of a SaslAuthenticate v1 answer."""
    r = _Reader(data)
    if r.take(">i") != correlation_id:
        raise ValueError("SASL authenticate response to another request")
    error, message = r.take(">h"), r.string()
    n = r.take(">i")
    token = r.data[r.at:r.at + max(n, 0)]
    if len(token) < max(n, 0):
        raise ValueError("SASL authenticate response ends early")
    return error, message, token


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    @classmethod
    def answer(cls, data: bytes, correlation_id: int, what: str) -> _Reader:
        """A reader of a response body past its correlation id (which must be
        ``correlation_id``) and its throttle time."""
        r = cls(data)
        if r.take(">i") != correlation_id:
            raise ValueError(f"{what} response to another request")
        r.take(">i")  # throttle_time_ms
        return r

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
    r = _Reader.answer(data, correlation_id, "metadata")
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
        correlation_id: int = 1, security: Security | None = None
        ) -> tuple[dict[int, tuple[str, int]], dict[tuple[str, int], BrokerView]]:
    """One broker's metadata for ``topics``, in ``timeout`` seconds or an ``OSError``
    (``PermissionError`` when SASL is refused), over ``security`` (None: plain TCP)."""
    return _round_trip(host, port, encode_request(correlation_id, CLIENT_ID, topics),
                       lambda data: decode_response(data, correlation_id), timeout, security)


def _round_trip(host: str, port: int, request: bytes, decode, timeout: float,
                security: Security | None):
    """One request on a fresh connection (TLS and SASL as ``security`` says), its answer
    decoded."""
    security = security or Security()
    with socket.create_connection((host, port), timeout=timeout) as raw:
        raw.settimeout(timeout)
        s = security.tls.wrap_socket(raw, server_hostname=host) if security.tls else raw
        try:
            if security.sasl is not None:
                _authenticate(s, *security.sasl)
            s.sendall(request)
            return decode(_answer(s))
        finally:
            if s is not raw:
                s.close()


def _answer(s: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv(s, 4))[0]
    return _recv(s, size)


def _authenticate(s: socket.socket, mechanism: str, user: str, password: str) -> None:
    """SASL on a fresh connection: the handshake, then the mechanism's exchange."""
    s.sendall(encode_sasl_handshake(101, CLIENT_ID, mechanism))
    error, enabled = decode_sasl_handshake(_answer(s), 101)
    if error:
        raise PermissionError(f"SASL handshake refused (error {error}): the broker offers "
                              f"{', '.join(enabled) or 'no mechanism'}")

    def exchange(cid: int, token: bytes) -> bytes:
        s.sendall(encode_sasl_authenticate(cid, CLIENT_ID, token))
        error, message, answer = decode_sasl_authenticate(_answer(s), cid)
        if error:
            raise PermissionError(f"SASL {mechanism} refused (error {error}): {message}")
        return answer

    if mechanism == "PLAIN":
        exchange(102, b"\0" + user.encode() + b"\0" + password.encode())
        return
    from scramp import ScramClient

    c = ScramClient([mechanism], user, password)
    c.set_server_first(exchange(102, c.get_client_first().encode()).decode())
    c.set_server_final(exchange(103, c.get_client_final().encode()).decode())


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
