"""Spools are their user's alone: anyone who could write one could add acks to the ledger.

Folders 0700 and files 0600 whatever the umask, for the Python ledger's spool, the kaudit
plugin's and the shipper's; a spool root of ours left open is closed, anyone else's that
others may write is refused; the plugin never falls back to a shared folder (/tmp) when
HOME is unset."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from kafka_audit.errors import LedgerWriteError
from kafka_audit.producers.ledger import AckLedger, SpoolCommitter
from kafka_audit.producers.native import load_plugin
from kafka_audit.producers.shipper import ship_spools
from kafka_audit.schemas.policy import Durability
from kafka_audit.schemas.tables import arrow_schema

NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens, every write times out
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, setuid)")


@pytest.fixture(autouse=True)
def usual_umask():
    """The umask most systems give (022): folders 0755 and files 0644 unless asked."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(root: Path) -> dict[str, str]:
    """Every folder and file under ``root`` (itself included) with its mode."""
    out = {".": oct(stat.S_IMODE(root.stat().st_mode))}
    for p in root.rglob("*"):
        out[str(p.relative_to(root))] = oct(stat.S_IMODE(p.lstat().st_mode))
    return out


def assert_private(root: Path) -> None:
    wrong = {name: mode for name, mode in modes(root).items()
             if mode != ("0o700" if (root / name).is_dir() else "0o600")}
    assert wrong == {}


def test_the_python_ledgers_spool_is_private(tmp_path):
    root = tmp_path / "home" / "spool" / "acks"
    led = AckLedger(str(tmp_path / "acks"), root, "p/r", "p", "r",
                    Durability("1", False, 2, 5), flush_seconds=60)
    try:
        # a segment as the writer spools it, before its commit deletes it
        led._spool.spool(pa.Table.from_pylist([], arrow_schema("acks")), 1)
        assert {p.name for p in led.spool.iterdir()} >= {".lock", "app_id",
                                                        f"{1:020d}.arrow"}
        assert_private(tmp_path / "home")  # every folder it created, down from home
    finally:
        led.close()


def test_a_spool_root_of_ours_left_open_is_closed(tmp_path):
    root = tmp_path / "spool"
    root.mkdir()
    os.chmod(root, 0o777)  # an older version's, or a careless mkdir
    AckLedger(str(tmp_path / "acks"), root, "p/r", "p", "r",
              Durability("1", False, 2, 5)).close()
    assert_private(root)
    os.chmod(root, 0o777)
    ship_spools(root, str(tmp_path / "acks"))
    assert_private(root)
    SpoolCommitter(str(tmp_path / "acks"), root / "p_r", "p/r").lock()
    assert_private(root)


@ROOT_ONLY
def test_a_spool_root_others_may_write_is_refused(tmp_path, capfd):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o777)
    os.chown(root, 54321, 54321)  # someone else's, open to all
    with pytest.raises(LedgerWriteError, match="may be written by others"):
        AckLedger(str(tmp_path / "acks"), root, "p/r", "p", "r",
                  Durability("1", False, 2, 5))
    with pytest.raises(LedgerWriteError, match="may be written by others"):
        ship_spools(root, str(tmp_path / "acks"))
    capfd.readouterr()
    p = Producer(_plugin_conf(root))  # librdkafka logs an interceptor's failure, goes on
    del p
    assert "may be written by others" in capfd.readouterr().err
    assert list(root.iterdir()) == []  # and the plugin spooled nothing there


def _plugin_conf(spool: Path, **extra) -> dict:
    return {"bootstrap.servers": NOWHERE, "message.timeout.ms": 300,
            "plugin.library.paths": str(load_plugin()), "kaudit.producer.id": "u",
            "kaudit.spool.dir": str(spool), **extra}


def test_the_plugins_and_the_shippers_spool_is_private(tmp_path):
    spool = tmp_path / "a" / "b" / "spool"
    p = Producer(_plugin_conf(spool, **{"kaudit.run.id": "r1"}))
    for i in range(20):
        p.produce("t", b"v%d" % i)
    p.flush(5)  # every write fails at once (nothing listens): runs to ship
    report = ship_spools(spool, str(tmp_path / "acks"))  # the producer lives: it stays
    assert report.rows > 0 and report.finished == 0
    names = set(modes(spool))
    assert {"u_r1", "u_r1/.lock", "u_r1/meta", "u_r1/state", "u_r1/topics",
            "u_r1/00000001.seg", "u_r1/ship", "u_r1/ship/cursor.json"} <= names
    assert_private(tmp_path / "a")
    del p


def test_a_spool_root_of_ours_left_open_is_closed_by_the_plugin(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    os.chmod(spool, 0o777)
    p = Producer(_plugin_conf(spool, **{"kaudit.run.id": "r1"}))
    assert_private(spool)
    del p


@ROOT_ONLY
@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_without_home_the_plugin_refuses_rather_than_use_tmp():
    """A user with no HOME and no passwd entry has no folder of its own, so no spool (the
    plugin used /tmp/.local/share/kafka-audit, a folder anyone could have made first).
    kcat, a producer in C (Debian's librdkafka), run as such a user."""
    shared = Path(tempfile.mkdtemp(prefix="kaudit-nohome-"))
    try:
        os.chmod(shared, 0o755)
        plugin = shared / "libkaudit.so"
        shutil.copy(load_plugin(), plugin)
        os.chmod(plugin, 0o755)
        env = {k: v for k, v in os.environ.items()
               if k not in ("HOME", "KAFKA_AUDIT_HOME", "XDG_DATA_HOME")}
        before = set(Path("/tmp").glob(".local/share/kafka-audit/spool/native/*"))

        def become_nobody():
            os.setgroups([])
            os.setgid(54321)
            os.setuid(54321)  # no passwd entry (the test checks)

        import pwd

        with pytest.raises(KeyError):
            pwd.getpwuid(54321)
        done = subprocess.run(["kcat", "-b", NOWHERE, "-X", f"plugin.library.paths={plugin}",
                               "-X", "message.timeout.ms=300", "-P", "-t", "t"],
                              input="x\n", env=env, cwd=shared, capture_output=True,
                              text=True, timeout=60, preexec_fn=become_nobody)
        assert "kaudit: no folder of this user for the spool" in done.stderr, done.stderr
        assert set(Path("/tmp").glob(".local/share/kafka-audit/spool/native/*")) == before
    finally:
        shutil.rmtree(shared, ignore_errors=True)
