"""The native path (the kaudit plugin in confluent-kafka's librdkafka 2.16.0) on the real
cluster: the same traffic both ways gives equivalent ledgers; stamping in on_send holds
with batching, compression, idempotence, transactions, retries and at the size limit (and
the size guard is why it holds there); a SIGKILLed producer loses no report."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaException

from kafka_audit.jars import plugin_library
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.producers.native import load_plugin, native_spool_root, spool_folder_name
from kafka_audit.producers.shipper import ship_spools
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.faults import cut_port
from kafka_audit.schemas.stamp import HEADER

from ..support.native_checks import ledger_reports, ledger_sources, read_log

N = 3000


def traffic(p, topic, told, n=N):
    """Explicit partitions in blocks, every tenth record keyed: runs and their breaks."""
    def cb(err, msg):
        told.append((err, msg.partition(), msg.offset()))

    for i in range(n):
        if i % 10 == 0:
            p.produce(topic, b"keyed %d" % i, key=b"k%d" % (i % 7), on_delivery=cb)
        else:
            p.produce(topic, b"value %d" % i, partition=(i // 500) % 3, on_delivery=cb)
        if i % 500 == 0:
            p.poll(0)


def test_the_same_traffic_both_ways_gives_equivalent_ledgers(cluster, settings, topic):
    conf = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5}
    ledgers, producers = {}, {}
    for native in (True, False):
        told, defaults = [], []
        p = AuditedProducer({**conf, "on_delivery": lambda e, m, d=defaults: d.append(e)},
                            f"eq-{native}", settings, native=native)
        assert p.native is native
        traffic(p, topic, told)
        p.close()
        assert (p.sent, p.acked, p.failed) == (N, N, 0)
        # the caller's own callbacks: per message, as given; the default one, never (every
        # record here named its own), exactly as confluent-kafka does
        assert len(told) == N and {e for e, _p, _o in told} == {None} and defaults == []
        reports = ledger_reports(settings, f"eq-{native}")
        assert [r[0] for r in reports] == list(range(N))
        # the ledger is what the producer was told, report for report
        assert sorted((part, off) for _s, _t, part, off, _e in reports) == sorted(
            (part, off) for _e, part, off in told)
        ledgers[native], producers[native] = reports, p
    # equivalent: every seq went to the same partition, delivered, both ways
    assert [(s, t, part, e) for s, t, part, _o, e in ledgers[True]] == [
        (s, t, part, e) for s, t, part, _o, e in ledgers[False]]
    # each acked offset holds its producer's stamp for that seq, checksum intact: version 2
    # (XXH64, the plugin's) one way, version 1 (CRC32, Python's) the other
    log = read_log(cluster.bootstrap, topic)
    for native, version in ((True, 2), (False, 1)):
        p = producers[native]
        for seq, _t, part, off, _e in ledgers[native]:
            rec = log[(part, off)]
            assert (rec.stamp.producer_id, rec.stamp.run_id, rec.stamp.seq,
                    rec.stamp.version, rec.checksum_ok) == (p.producer_id, p.run_id, seq,
                                                            version, True)
    assert len(log) == 2 * N
    assert not any(native_spool_root(settings).iterdir())  # shipped, folder removed
    # who acknowledged each write: the plugin names the partition's leader; confluent-kafka's
    # Python reports name no broker, and librdkafka gives a produced message no epoch
    leaders = {info.partition: info.leader for info in cluster.partitions(topic)}
    for native, p in producers.items():
        sources = ledger_sources(settings, p.producer_id)
        assert len(sources) == N
        assert {(part, b, e) for (part, _o), (b, e) in sources.items()} == {
            (part, leaders[part] if native else None, None) for part in leaders}


def check_stamped_log(cluster, settings, topic, p, *, duplicates_ok=False):
    """Every record in the topic carries the producer's well-formed version 2 stamp with a
    matching checksum; each acked write sits at its acked offset; the ledger is the
    producer's own record."""
    log = read_log(cluster.bootstrap, topic)
    assert log, "nothing was written"
    stamps = [r.stamp for r in log.values()]
    assert all(s is not None and s.version == 2 and (s.producer_id, s.run_id) == (
        p.producer_id, p.run_id) for s in stamps)
    assert all(r.checksum_ok for r in log.values())
    assert all(sum(1 for k, _v in r.headers if k == HEADER) == 1 for r in log.values())
    seqs = [s.seq for s in stamps]
    if not duplicates_ok:
        assert len(seqs) == len(set(seqs))
    for seq, _t, part, off in p.record:
        assert log[(part, off)].stamp.seq == seq
    mine = ledger_reports(settings, p.producer_id, p.run_id)
    assert mine == sorted([(s, t, part, off, None) for s, t, part, off in p.record]
                          + [(s, t, part, None, e) for s, t, part, e in p.failures])
    return log


CONFIGS = {
    "batching": {"linger.ms": 100, "batch.num.messages": 5000, "batch.size": 1000000},
    "gzip": {"compression.type": "gzip", "linger.ms": 20},
    "snappy": {"compression.type": "snappy", "linger.ms": 20},
    "lz4": {"compression.type": "lz4", "linger.ms": 20},
    "zstd": {"compression.type": "zstd", "linger.ms": 20},
    "idempotence": {"enable.idempotence": True, "linger.ms": 5},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_stamps_added_in_on_send_reach_the_log(cluster, settings, topic, name):
    p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         **CONFIGS[name]}, f"on-send-{name}", settings, keep_record=True,
                         native=True)
    for i in range(2000):
        # values of many sizes, some with headers of their own, some null
        value = None if i % 97 == 0 else os.urandom(i % 1500)
        p.produce(topic, value, key=b"%d" % (i % 5) if i % 3 else None,
                  headers=[("app", b"h%d" % i)] if i % 4 == 0 else None)
    p.close()
    assert (p.acked, p.failed) == (2000, 0)
    log = check_stamped_log(cluster, settings, topic, p)
    assert sorted(r.stamp.seq for r in log.values()) == list(range(2000))
    assert all(("app", b"h%d" % r.stamp.seq) in r.headers for r in log.values()
               if r.stamp.seq % 4 == 0)  # the application's headers are kept beside it


def test_every_id_the_plugin_takes_is_one_the_readers_accept(cluster, settings, topic):
    """The stamp corpus's ids, as the plugin writes them: the ones it takes (the others are
    refused at configuration: tests/unit/test_plugin_native.py) come back whole from the
    log, a well-formed stamp each, as producer id (from kaudit.producer.id or from
    client.id) and as run id."""
    from confluent_kafka import Producer

    from ..support.stamp_corpus import ID_CASES

    base = {"bootstrap.servers": cluster.bootstrap, "plugin.library.paths": str(load_plugin()),
            "kaudit.spool.dir": str(native_spool_root(settings))}
    wrote = []
    for n, case in enumerate(c for c in ID_CASES if c.valid):
        text = case.raw.decode()
        for conf, ids in (({"kaudit.producer.id": text, "kaudit.run.id": f"a{n}"},
                           (text, f"a{n}")),
                          ({"client.id": text, "kaudit.run.id": f"b{n}"}, (text, f"b{n}")),
                          # (spool folders name ids cut to 100 bytes: one producer each)
                          ({"kaudit.producer.id": f"c{n}", "kaudit.run.id": text},
                           (f"c{n}", text))):
            p = Producer({**base, **conf})
            p.produce(topic, b"%d" % len(wrote), partition=0)
            assert p.flush(30) == 0
            wrote.append(ids)
    log = read_log(cluster.bootstrap, topic)
    assert not any(r.malformed for r in log.values())
    assert [(r.stamp.producer_id, r.stamp.run_id, r.stamp.seq, r.checksum_ok)
            for _, r in sorted(log.items())] == [(*ids, 0, True) for ids in wrote]


def test_stamps_hold_in_committed_and_aborted_transactions(cluster, settings, topic):
    p = AuditedProducer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": f"tx-{uuid.uuid4().hex[:6]}", "linger.ms": 5},
                        "on-send-tx", settings, keep_record=True, native=True)
    p.init_transactions()
    for t in range(4):
        p.begin_transaction()
        for i in range(300):
            p.produce(topic, b"tx %d %d" % (t, i), partition=i % 3)
        p.flush()  # delivered (acked) before the outcome is decided
        if t == 2:
            p.abort_transaction()  # written and acked, then aborted: still in the log
        else:
            p.commit_transaction()
    p.close()
    assert p.acked == 1200 and p.durability.idempotence
    log = check_stamped_log(cluster, settings, topic, p)
    assert sorted(r.stamp.seq for r in log.values()) == list(range(1200))


def test_a_retried_batch_carries_the_same_stamps(cluster, settings, topic):
    """Partition 0's leader cut off from its followers: the broker times the appends out,
    the producer (no idempotence) sends the same batches again; the copies in the log carry
    byte-identical stamps (stamped once, in on_send, never again)."""
    conf = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False,
            "retries": 1000, "max.in.flight.requests.per.connection": 5,
            "request.timeout.ms": 1000, "message.timeout.ms": 60000, "linger.ms": 5}
    p = AuditedProducer(conf, "on-send-retry", settings, keep_record=True, native=True)
    leader = cluster.leader_of(topic, 0)

    def produce_for(seconds, rate=5000):
        start, sent = time.monotonic(), 0
        while (elapsed := time.monotonic() - start) < seconds:
            if sent > elapsed * rate:
                p.poll(0.005)
                continue
            p.produce(topic, os.urandom(64), partition=0)
            sent += 1
            if sent % 200 == 0:
                p.poll(0)

    produce_for(1)
    with cut_port(settings.cluster.replication_port(leader)):
        produce_for(2)
    produce_for(1)
    p.close()
    assert p.failed == 0
    log = check_stamped_log(cluster, settings, topic, p, duplicates_ok=True)
    copies: dict[int, set] = {}
    for r in log.values():
        copies.setdefault(r.stamp.seq, set()).add(dict(r.headers)[HEADER])
    assert any(len([1 for r in log.values() if r.stamp.seq == s]) > 1 for s in copies), \
        "the cut is expected to make the producer write some batches twice"
    assert all(len(v) == 1 for v in copies.values())  # every copy: the same stamp bytes


LIMIT = 20000  # the producer's message.max.bytes here
V2_MAX_OVERHEAD = 36  # librdkafka's per-record bound


def test_at_the_size_limit_a_record_is_left_unstamped_not_lost(cluster, settings, topic):
    """librdkafka checks message.max.bytes before on_send, without the stamp. A record
    within the stamp's size of the limit is sent unstamped (counted, not ledgered); one
    that fits with its stamp is stamped; one past the limit is refused as before."""
    p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "message.max.bytes": LIMIT}, "size", settings, keep_record=True,
                        native=True)
    stamp_len = 19 + len("size") + len(p.run_id)
    header = 1 + len(HEADER) + 1 + stamp_len  # name and value, each with its varint length
    fits = LIMIT - V2_MAX_OVERHEAD - header
    p.produce(topic, b"a" * fits, partition=0)  # seq 0: exactly fits with its stamp
    p.produce(topic, b"b" * (fits + 1), partition=0)  # seq 1: one byte too many: unstamped
    p.produce(topic, b"c" * (LIMIT - V2_MAX_OVERHEAD), partition=0)  # seq 2: at the limit
    with_hdr = fits - (1 + 3 + 1 + 5)  # seq 3: the application's own header counted too
    p.produce(topic, b"d" * with_hdr, partition=0, headers=[("own", b"12345")])
    p.produce(topic, b"e" * (with_hdr + 1), partition=0, headers=[("own", b"12345")])
    with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
        p.produce(topic, b"f" * (LIMIT - V2_MAX_OVERHEAD + 1), partition=0)
    assert p.unstamped == 3
    p.close()
    # acked and failed count audited (stamped) writes; the application was told of all five
    assert (p.sent, p.acked, p.failed, p.unstamped, len(p.record)) == (5, 2, 0, 3, 5)
    log = read_log(cluster.bootstrap, topic)
    got = {r.value[:1]: r for r in log.values()}
    assert sorted(got) == [b"a", b"b", b"c", b"d", b"e"]  # all five delivered
    assert [got[k].stamp.seq for k in (b"a", b"d")] == [0, 3]
    assert all(got[k].checksum_ok for k in (b"a", b"d"))
    assert all(got[k].stamp is None and not got[k].malformed for k in (b"b", b"c", b"e"))
    # only stamped writes are in the ledger: an unstamped one could never be found again
    assert [r[0] for r in ledger_reports(settings, "size")] == [0, 3]


GUARDLESS = """
import sys
from confluent_kafka import Producer
from kafka_audit.producers.native import load_plugin
load_plugin()
p = Producer({"bootstrap.servers": sys.argv[1], "plugin.library.paths": sys.argv[2],
              "kaudit.producer.id": "guardless", "kaudit.spool.dir": sys.argv[3],
              "message.max.bytes": LIMIT, "linger.ms": 0})
p.produce(sys.argv[4], b"x" * (LIMIT - 36), partition=0)
print("flushed", p.flush(30), flush=True)
""".replace("LIMIT", str(LIMIT))


def test_without_the_size_guard_librdkafka_aborts(cluster, tmp_path, topic):
    """Why the guard: stamped at the limit, the record overflows message.max.bytes after
    librdkafka checked it, and librdkafka's batch writer asserts (SIGABRT)."""
    lib = plugin_library(quiet=True, defines=("KAUDIT_NO_SIZE_GUARD",),
                         folder=tmp_path / "guardless")
    proc = subprocess.run([sys.executable, "-c", GUARDLESS, cluster.bootstrap, str(lib),
                           str(tmp_path / "spool"), topic], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGABRT, (proc.returncode, proc.stdout, proc.stderr)
    assert "rd_kafka_msgset_writer_finalize" in proc.stderr


KILLED = """
import os, sys
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.settings import Settings
s = Settings(home=sys.argv[1])
out = os.fdopen(1, "w", buffering=1)
def told(err, msg):  # the application has been told: one line, before the next report
    out.write("%d %d %s\\n" % (msg.partition(), msg.offset(), err is None))
p = AuditedProducer({"bootstrap.servers": sys.argv[2], "acks": "all", "linger.ms": 2},
                    "killed", s, run_id="r", native=True)
out.write("ready\\n")
i = 0
while True:
    p.produce(sys.argv[3], b"v%d" % i, on_delivery=told)
    i += 1
    if i % 100 == 0:
        p.poll(0.001)
"""


def test_a_sigkilled_producer_loses_no_acknowledged_report(cluster, settings, topic):
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(settings.home_dir),
                             cluster.bootstrap, topic], stdout=subprocess.PIPE, text=True)
    told: list[tuple[int, int]] = []
    try:
        assert proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 60
        while len(told) < 20000 and time.monotonic() < deadline:
            part, off, ok = proc.stdout.readline().split()
            assert ok == "True"
            told.append((int(part), int(off)))
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-stream: reports in flight, runs open
        proc.wait(30)
    for line in proc.stdout:
        if line.count(" ") == 2:
            part, off, _ok = line.split()
            told.append((int(part), int(off)))
    assert len(told) >= 20000
    folder = native_spool_root(settings) / spool_folder_name("killed", "r")
    assert folder.is_dir()
    report = ship_spools(native_spool_root(settings), settings.table_path("acks"))
    assert report.finished == 1 and not folder.exists()
    reports = ledger_reports(settings, "killed")
    seqs = [r[0] for r in reports]
    assert len(seqs) == len(set(seqs))  # exactly once
    ledgered = {(part, off) for _s, _t, part, off, _e in reports}
    assert set(told) <= ledgered  # every report the application was told of
    log = read_log(cluster.bootstrap, topic)
    assert all(log[(part, off)].stamp.seq == seq for seq, _t, part, off, _e in reports)
    # shipping again writes nothing
    assert ship_spools(native_spool_root(settings), settings.table_path("acks")).rows == 0
    wait_until(lambda: ledger_reports(settings, "killed") == reports, 5, "a stable ledger")


def test_the_plugin_loads_into_the_wheels_librdkafka():
    from confluent_kafka import libversion

    assert libversion()[0] == "2.16.0"  # the version the plugin's tested list names
    assert load_plugin().is_file()


FIRST_FORM = """
import sys
from confluent_kafka import Producer
from kafka_audit.producers.native import load_plugin, plugin_properties
from pathlib import Path
load_plugin()  # librdkafka's symbols in the global scope, for the plugin given below
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "linger.ms": 5,
              **plugin_properties(Path(sys.argv[2]), Path(sys.argv[3]), "first-form", "r1")})
def told(err, msg):
    print(msg.partition(), msg.offset(), err is None, flush=True)
for i in range(int(sys.argv[5])):
    p.produce(sys.argv[4], b"v%d" % i, partition=i % 3, on_delivery=told)
    if i % 100 == 0:
        p.poll(0)
assert p.flush(60) == 0
"""


def test_a_spool_an_older_plugin_wrote_ships_beside_the_current_ones(cluster, settings,
                                                                      topic):
    """Upgraded in place: what an older plugin (64-byte run records, no broker or epoch)
    left in the spool ships with the current shipper, next to a current producer's."""
    old = plugin_library(quiet=True, defines=("KAUDIT_SPOOL_FORM_1",),
                         folder=settings.home_dir / "first-form")
    root = native_spool_root(settings)
    n = 900
    proc = subprocess.run([sys.executable, "-c", FIRST_FORM, cluster.bootstrap, str(old),
                           str(root), topic, str(n)], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr
    told = sorted((int(a), int(b)) for a, b, ok in (line.split() for line in
                                                    proc.stdout.splitlines()) if ok == "True")
    assert len(told) == n
    folder = root / spool_folder_name("first-form", "r1")
    assert (folder / "00000001.seg").read_bytes()[:8] == b"KAUDSEG1"
    p = AuditedProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}, "current",
                        settings, native=True)
    for i in range(n):
        p.produce(topic, b"w%d" % i, partition=i % 3)
    p.close()
    report = ship_spools(root, settings.table_path("acks"))
    assert report.failed == 0
    older = ledger_sources(settings, "first-form")
    assert sorted(older) == told and set(older.values()) == {(None, None)}
    leaders = {info.partition: info.leader for info in cluster.partitions(topic)}
    current = ledger_sources(settings, "current")
    assert len(current) == n
    assert {(part, b) for (part, _o), (b, _e) in current.items()} == set(leaders.items())
    assert not folder.exists()  # shipped whole, removed
