"""How often the API asks the warehouse for a table's newest version.

On local disk every request asks (two ``stat`` calls); on an object store each ask is a
request to the store, so an answer is reused for ``api.version_check_seconds`` (1 s by
default there): 50 clients then cost the store one ask a table a second, not one each.
"""

import threading
import time

from kafka_audit.auditor_api.deps import new_snapshots
from kafka_audit.auditor_api.snapshots import Snapshots
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows

from ..support.rows import ledger_row


def test_a_probed_version_answers_for_its_window_then_the_table_is_asked_again(tmp_path):
    s = Settings(home=tmp_path)
    path = s.table_path("acks")
    append_rows(path, "acks", [ledger_row(0)])
    snaps = Snapshots(s.table_path, recheck_seconds=0.5)
    assert snaps.version("acks") == 0 and snaps.probes == 1
    append_rows(path, "acks", [ledger_row(1)])
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(snaps.version("acks")))
               for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [0] * 20 and snaps.probes == 1  # within the window: the answer held
    time.sleep(0.6)
    assert snaps.version("acks") == 1 and snaps.probes == 2
    assert snaps.get("acks").version == 1 and snaps.probes == 2


def test_every_request_asks_on_local_disk():
    snaps = Snapshots(lambda name: "/nonexistent/" + name)
    for _ in range(3):
        assert snaps.version("acks") == -1
    assert snaps.probes == 3


def test_the_default_window_is_zero_on_disk_and_a_second_on_an_object_store(tmp_path):
    on_disk = new_snapshots(Settings(home=tmp_path))
    assert on_disk._recheck == 0
    remote = Settings(home=tmp_path, warehouse="s3://b/w", storage={
        "endpoint_url": "http://127.0.0.1:1", "access_key_id": "a", "secret_access_key": "s"})
    assert new_snapshots(remote)._recheck == 1.0
    chosen = Settings(home=tmp_path, api={"version_check_seconds": 0.25})
    assert new_snapshots(chosen)._recheck == 0.25
