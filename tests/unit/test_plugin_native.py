"""The kaudit plugin itself, with no broker: its checksum, its configuration errors, its
version check, its spool of failed writes, a SIGKILLed producer's reports, and
``AuditedProducer``'s fallback. (The real cluster's tests: tests/cluster/test_plugin*.py.)"""

import ctypes
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaException, Producer
from deltalake import DeltaTable

from kafka_audit.jars import plugin_library
from kafka_audit.producers import instrumented
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.producers.native import (
    NativeFallbackWarning,
    PluginUnavailable,
    SpoolState,
    librdkafka_path,
    load_plugin,
    native_spool_root,
    spool_folder_name,
)
from kafka_audit.producers.shipper import ship_spools
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.schemas.stamp import StampError, xxh64, xxh64_reference
from kafka_audit.settings import Settings

from ..support.stamp_corpus import ID_CASES

NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens, every write times out


@pytest.fixture(scope="module")
def plugin():
    return load_plugin()


def conf(tmp_path, **extra):
    return {"bootstrap.servers": NOWHERE, "message.timeout.ms": 300,
            "plugin.library.paths": str(load_plugin()), "kaudit.producer.id": "u",
            "kaudit.spool.dir": str(tmp_path / "spool"), **extra}


def test_the_plugins_checksum_is_the_stamp_rules_xxh64(plugin):
    lib = ctypes.CDLL(str(plugin))
    lib.kaudit_checksum.restype = ctypes.c_uint64
    lib.kaudit_checksum.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    rnd = random.Random(7)
    for n in [*range(0, 70), 100, 1000, 1024, 4097]:
        data = bytes(rnd.randrange(256) for _ in range(n))
        assert lib.kaudit_checksum(data, n) == xxh64(data) == xxh64_reference(data), n
    for h in (xxh64, xxh64_reference):  # the reference's own test vectors
        assert h(b"", 0) == 0xEF46DB3751D8E999
        assert h(b"abc", 0) == 0x44BC2CF5AD770999


@pytest.mark.parametrize("prop, value, says", [
    ("kaudit.bogus", "1", "unknown property kaudit.bogus"),
    ("kaudit.spool.fsync.ms", "0", r"must be -1 \(never\) or 1-3600000"),
    ("kaudit.producer.id", "x" * 256, "1-255 bytes of UTF-8"),
    ("kaudit.spool.segment.records", "3", "16-16777216"),
    ("kaudit.acks", "2", "must be 0, 1, -1 or all"),
])
def test_a_bad_kaudit_property_is_a_configuration_error(tmp_path, prop, value, says):
    with pytest.raises(KafkaException, match=says):
        Producer(conf(tmp_path, **{prop: value}))


class RawConf:
    """A librdkafka configuration set through its C API: property values of any bytes (a
    Python client's are str)."""

    OK, INVALID = 0, -1

    def __init__(self):
        self.lib = ctypes.CDLL(librdkafka_path())
        self.lib.rd_kafka_conf_new.restype = ctypes.c_void_p
        self.lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                               ctypes.c_char_p, ctypes.c_char_p,
                                               ctypes.c_size_t]
        self.lib.rd_kafka_conf_destroy.argtypes = [ctypes.c_void_p]
        self.conf = self.lib.rd_kafka_conf_new()

    def set(self, name: str, value: bytes) -> tuple[int, str]:
        err = ctypes.create_string_buffer(512)
        res = self.lib.rd_kafka_conf_set(self.conf, name.encode(), value, err, len(err))
        return res, err.value.decode(errors="replace")

    def close(self):
        self.lib.rd_kafka_conf_destroy(self.conf)


@pytest.mark.parametrize("case", ID_CASES, ids=lambda c: c.name)
def test_the_plugin_takes_exactly_the_ids_the_readers_accept(plugin, case):
    """One stamp rule for every path: an id the readers would find malformed (every stamp of
    the producer, so the producer not audited) is refused when it is configured, with an
    error naming the property; client.id is checked as the producer id it is without
    kaudit.producer.id, never cut to fit."""
    lib = str(plugin).encode()
    for prop in ("kaudit.producer.id", "kaudit.run.id", "client.id"):
        conf = RawConf()
        try:
            assert conf.set("plugin.library.paths", lib) == (RawConf.OK, "")
            res, err = conf.set(prop, case.raw)
            if not case.raw:  # librdkafka passes no value: its default, or none for ours
                assert (res, err) == ((RawConf.OK, "") if prop == "client.id" else (
                    RawConf.INVALID, f"kaudit: {prop} needs a value")), prop
            elif case.valid:
                assert (res, err) == (RawConf.OK, ""), prop
            else:
                assert res == RawConf.INVALID and f"kaudit: {prop} must be 1-255 bytes of " \
                    "UTF-8" in err, (prop, err)
                if prop == "client.id":
                    assert "set kaudit.producer.id" in err
        finally:
            conf.close()
    # client.id set before the plugin is loaded: refused when it loads
    conf = RawConf()
    try:
        assert conf.set("client.id", case.raw)[0] == RawConf.OK  # librdkafka's own check
        res, err = conf.set("plugin.library.paths", lib)
        assert (res == RawConf.OK) is (case.valid or not case.raw), err
        assert res == RawConf.OK or "kaudit: client.id must be 1-255 bytes of UTF-8" in err, err
    finally:
        conf.close()
    # with kaudit.producer.id set first, client.id is librdkafka's alone
    conf = RawConf()
    try:
        assert conf.set("plugin.library.paths", lib)[0] == RawConf.OK
        assert conf.set("kaudit.producer.id", b"named")[0] == RawConf.OK
        assert conf.set("client.id", case.raw or b"x") == (RawConf.OK, "")
    finally:
        conf.close()


@pytest.mark.parametrize("client_id", [
    "p" * 253 + "\u00e9",  # 255 bytes: whole, not one byte less
    "\u00e9\u4e2d\U0001f600"])
def test_client_id_is_the_producer_id_whole(tmp_path, client_id):
    cfg = conf(tmp_path, **{"client.id": client_id, "kaudit.run.id": "c"})
    del cfg["kaudit.producer.id"]
    p = Producer(cfg)
    del p
    (meta,) = (tmp_path / "spool").glob("*/meta")
    assert f"\nproducer_id_hex={client_id.encode().hex()}\n" in meta.read_text()


def test_a_client_id_too_long_to_name_the_producer_fails_the_client(tmp_path):
    cfg = conf(tmp_path, **{"client.id": "c" * 300})
    del cfg["kaudit.producer.id"]
    with pytest.raises(KafkaException, match="kaudit: client.id must be 1-255 bytes of UTF-8 "
                                             r"\(a stamp id\), got 300 bytes"):
        Producer(cfg)
    assert not (tmp_path / "spool").exists()


@pytest.mark.parametrize("data, mode, says", [
    (b"k" * 15, 0o600, "holds 15 bytes: a stamp key is 16-4096 bytes"),
    (b"k" * 4097, 0o600, "holds 4097+ bytes"),
    (b"k" * 32, 0o644, "is readable by others (mode 644): chmod o-r it"),
    (None, 0o600, "cannot be read: No such file or directory"),
])
def test_a_stamp_key_file_that_cannot_be_a_key_fails_the_client(tmp_path, data, mode, says):
    """The plugin checks kaudit.stamp.key.file as kafka_audit/stamp_key.py checks
    stamp.key_file, when it is set: the client is not created."""
    path = tmp_path / "stamp.key"
    if data is not None:
        path.write_bytes(data)
        path.chmod(mode)
    with pytest.raises(KafkaException, match=f"kaudit: kaudit.stamp.key.file {path} "
                                             + re.escape(says)):
        Producer(conf(tmp_path, **{"kaudit.stamp.key.file": str(path)}))
    assert not (tmp_path / "spool").exists()


@pytest.mark.parametrize("extra, recorded", [
    ({}, "all"), ({"acks": "1"}, "1"), ({"acks": "0"}, "0"), ({"acks": "-1"}, "all"),
    # declared: the application sets acks where the plugin cannot read it (kcat -P)
    ({"kaudit.acks": "1"}, "1"), ({"acks": "1", "kaudit.acks": "all"}, "all"),
])
def test_the_run_records_the_acks_it_writes_with(tmp_path, extra, recorded):
    p = Producer(conf(tmp_path, **{"kaudit.run.id": "acks", **extra}))
    del p
    (meta,) = (tmp_path / "spool").glob("*/meta")
    assert f"\nacks={recorded}\n" in meta.read_text()


def test_the_plugin_refuses_a_librdkafka_it_was_not_tested_with(tmp_path):
    lib = plugin_library(quiet=True, defines=("KAUDIT_TESTED=0x010203,0x090807",),
                         folder=tmp_path / "variant")
    load_plugin()  # librdkafka promoted
    with pytest.raises(KafkaException) as err:
        Producer({**conf(tmp_path), "plugin.library.paths": str(lib)})
    said = str(err.value)
    assert "librdkafka 2.16.0 is not a version it was tested with (1.2.3, 9.8.7)" in said
    assert not (tmp_path / "spool").exists()


def acks(settings):
    return DeltaTable(settings.table_path("acks")).to_pyarrow_table().to_pylist()


def test_failed_writes_are_spooled_and_shipped(tmp_path):
    settings = Settings(home=tmp_path)
    seen = []
    p = AuditedProducer({"bootstrap.servers": NOWHERE, "message.timeout.ms": 300,
                         "on_delivery": lambda err, msg: seen.append(err.name())},
                        "u", settings, native=True)
    for i in range(50):
        p.produce("t", b"v%d" % i)
    assert p.flush(10) == 0
    p.close()
    assert (p.sent, p.acked, p.failed) == (50, 0, 50)
    assert seen == ["_MSG_TIMED_OUT"] * 50  # the caller's callback, untouched
    rows = acks(settings)
    assert sorted(r["seq"] + k for r in rows for k in range(r["count"])) == list(range(50))
    assert {(r["error_name"], r["partition"], r["offset"]) for r in rows} == {
        ("_MSG_TIMED_OUT", -1, None)}
    assert len(rows) < 50  # consecutive seqs sharing an error fold into runs
    assert not any(native_spool_root(settings).iterdir())  # shipped and removed


KILLED = """
import os, sys, time
from kafka_audit.producers.instrumented import AuditedProducer
from kafka_audit.settings import Settings
s = Settings(home=sys.argv[1])
out = os.fdopen(1, "w", buffering=1)
def told(err, msg):
    out.write("%s\\n" % err.name())  # the application has been told of this report
p = AuditedProducer({"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 200,
                     "on_delivery": told}, "k", s, run_id="killed", native=True)
out.write("ready\\n")
i = 0
while True:
    p.produce("t", b"v%d" % i)
    i += 1
    p.poll(0.001)
"""


def test_a_sigkilled_producer_loses_no_report(tmp_path):
    """No broker: every write fails after 200 ms. The producer is SIGKILLed while reports
    keep coming; the next shipper commits every report the application had been told of."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    told = 0
    try:
        assert proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 60
        while told < 300 and time.monotonic() < deadline:
            if proc.stdout.readline() == "_MSG_TIMED_OUT\n":
                told += 1
        assert told == 300
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    told += sum(1 for line in proc.stdout if line == "_MSG_TIMED_OUT\n")
    settings = Settings(home=tmp_path)
    folder = native_spool_root(settings) / spool_folder_name("k", "killed")
    assert SpoolState(folder).failed >= told  # in the page cache, though the process died
    report = ship_spools(native_spool_root(settings), settings.table_path("acks"))
    assert report.finished == 1 and not folder.exists()
    seqs = sorted(r["seq"] + k for r in acks(settings) for k in range(r["count"]))
    assert len(seqs) == len(set(seqs)) >= told
    assert seqs == list(range(len(seqs)))  # reports come in seq order here: none missing
    assert ship_spools(native_spool_root(settings), settings.table_path("acks")).rows == 0


def test_an_unavailable_plugin_falls_back_to_python_with_a_warning(tmp_path, monkeypatch):
    def unavailable():
        raise PluginUnavailable("no gcc here (test)")

    monkeypatch.setattr(instrumented, "load_plugin", unavailable)
    settings = Settings(home=tmp_path)
    with pytest.warns(NativeFallbackWarning, match="no gcc here"):
        p = AuditedProducer({"bootstrap.servers": NOWHERE, "message.timeout.ms": 200}, "f",
                            settings)
    assert not p.native
    assert p.produce("t", b"x") == 0
    p.flush(10)
    p.close()
    assert [(r["seq"], r["error_name"]) for r in acks(settings)] == [(0, "_MSG_TIMED_OUT")]
    with pytest.raises(PluginUnavailable):
        AuditedProducer({"bootstrap.servers": NOWHERE}, "f", settings, native=True)


def test_the_audited_producer_names_itself_by_its_ids_not_its_client_id(tmp_path):
    settings = Settings(home=tmp_path)
    p = AuditedProducer({"bootstrap.servers": NOWHERE, "client.id": "c" * 300}, "named",
                        settings, run_id="r", native=True)
    meta = (native_spool_root(settings) / "named_r" / "meta").read_text()
    p.close(1)
    assert f"\nproducer_id_hex={b'named'.hex()}\n" in meta
    for ids in (("p" * 256, "r"), ("p", "\udcff")):  # ids no reader would take
        with pytest.raises(StampError):
            AuditedProducer({"bootstrap.servers": NOWHERE}, *ids[:1], settings, run_id=ids[1])


def test_the_spool_survives_segment_rollover(tmp_path):
    """16 runs a segment: the plugin seals full segments and opens new ones; the shipper
    follows them in order."""
    p = Producer(conf(tmp_path, **{"kaudit.spool.segment.records": "16",
                                   "kaudit.run.id": "roll"}))
    for i in range(200):
        # a new run each time: alternate the (unknown) partitions' failures
        p.produce("t", b"v", partition=i % 2)
    wait_until(lambda: p.flush(1) == 0, 30, "every report")
    folder = tmp_path / "spool" / spool_folder_name("u", "roll")
    assert len(list(folder.glob("*.seg"))) >= 2
    p.close()
    settings = Settings(home=tmp_path)
    assert ship_spools(tmp_path / "spool", settings.table_path("acks")).finished == 1
    rows = acks(settings)
    assert sorted(r["seq"] + k for r in rows for k in range(r["count"])) == list(range(200))
    assert os.listdir(tmp_path / "spool") == []


def test_a_topics_first_report_is_shipped_at_once_not_at_the_interval(tmp_path):
    """The audit reads a topic from when the ledger first names it: the shipper ships
    within a quarter second of the plugin's first report of a topic (its ``topics`` file
    grows), not ``producer.ledger_flush_seconds`` (60 here) later; a report of a topic
    already shipped waits for the interval."""
    settings = Settings(home=tmp_path, producer={"ledger_flush_seconds": 60})
    p = AuditedProducer({"bootstrap.servers": NOWHERE, "message.timeout.ms": 300}, "u",
                        settings, native=True)

    def reported() -> bool:  # every report in (poll: AuditedProducer.flush would ship)
        p.poll(0.1)
        return len(p) == 0

    try:
        p.produce("a", b"v")
        wait_until(reported, 30, "a's report")
        wait_until(lambda: p.ledger.reports_written == 1, 20, "a's first report shipped")
        p.produce("a", b"w")
        wait_until(reported, 30, "a's second report")
        assert not p.ledger._new_topic_waits()  # "a" is shipped: this one waits
        p.produce("b", b"v")
        wait_until(reported, 30, "b's report")
        wait_until(lambda: p.ledger.reports_written == 3, 20, "b's first report shipped")
        assert sorted({r["topic"] for r in acks(settings)}) == ["a", "b"]
    finally:
        p.close()
