"""The suspicion marker: writes a leader change truncated, in ``suspicions`` at the fail-over.

The watcher answers each leader change with an ``epoch_end`` row of ``cluster_events``
(where the old leader's epoch ends in the new leader's log,
``jobs/watcher/epoch_ends.py``). Each round (every ``audit.suspect_seconds``) the marker:

* reads the ``cluster_events`` rows appended since its last round (the first: those of
  the last ``audit.suspect_follow_seconds`` + ``audit.suspect_lookback_seconds``): the
  ``epoch_end`` rows and the partitions' leaderships;
* follows each change for ``audit.suspect_follow_seconds`` after its answer (or after the
  marker first read it, if later: one that could not run meanwhile): the ledger
  commits a report up to a flush after it, and an old leader paused past its session
  may go on acknowledging when it resumes (a split brain: the rule takes its writes too);
* keeps the ledger's successful runs of the last ``audit.suspect_follow_seconds`` + 2 *
  ``audit.suspect_lookback_seconds`` (11 minutes by default) in memory, read whole once
  and then from the files each commit appended, whether or not a change is followed
  (reading them from the table at a change took seconds); a newly followed partition
  takes from them at once its runs reaching at or above its lowest followed end offset
  and acknowledged from ``audit.suspect_lookback_seconds`` before the oldest change
  followed on, then the runs appended since (a change answered so late that it needs
  older runs has the table read whole again); and applies the pure rule
  (:func:`~kafka_audit.jobs.core.suspicion.suspect`): the runs acknowledged before the
  change at once, later ones (a paused old leader's) after the watcher has had time to
  record whether the old leader leads again (:meth:`Marker._ripe`);
* appends the newly suspected pieces to ``suspicions`` as one idempotent Delta
  transaction. What a partition already has there (read when the marker starts following
  it) is never suspected again, so a restarted marker writes nothing twice.

A suspicion is a state, not a verdict: the audit judges every write as before; the API
derives each suspicion's state from the findings (:func:`~kafka_audit.schemas.suspicions.settle`).
A change the watcher did not answer (it was down, or the new leader did not say) marks
nothing: the read after settle still finds its losses.
"""

from __future__ import annotations

import copy
import functools
import logging
import operator
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from kafka_audit.jobs.core.model import AckRun
from kafka_audit.jobs.core.suspicion import (
    LEAD_SLACK,
    EpochEnd,
    Leadership,
    ack_run_of,
    epoch_end_of,
    leadership_of,
    suspect,
    suspicion_row,
)
from kafka_audit.schemas.events import EPOCH_END, FIRST_SEEN, LEADER_CHANGES
from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.settings import Settings
from kafka_audit.status import Outage, StatusWriter
from kafka_audit.store import (
    append_once,
    files_added_since,
    read_files,
    read_table,
    table_dataset,
    table_exists,
    transaction_version,
)

__all__ = ["Marker", "run_marker", "APP_ID", "RIPE_AFTER"]

log = logging.getLogger(__name__)

#: the marker's idempotent Delta transactions on ``suspicions``
APP_ID = "kafka_audit_suspicions"
#: how long after its acknowledgement a run acknowledged after a partition's last followed
#: change is taken (:meth:`Marker._ripe`): the watcher's time to record a return of the
#: leadership before it
RIPE_AFTER = 2 * LEAD_SLACK

Key = tuple[str, int]
Spans = dict[tuple[str, str], list[tuple[int, int]]]

_KINDS = pc.field("kind").isin([EPOCH_END, *LEADER_CHANGES, FIRST_SEEN])
_ACK_COLUMNS = ["topic", "partition", "producer_id", "run_id", "seq", "count", "offset",
                "ack_time", "last_ack_time", "error_name", "acks", "broker"]


def _ts(t: datetime) -> pa.Scalar:
    return pa.scalar(t, pa.timestamp("us", tz="UTC"))


def _of(key: Key) -> pc.Expression:
    """Rows of the partition ``key``."""
    return (pc.field("topic") == key[0]) & (pc.field("partition") == pa.scalar(key[1],
                                                                               pa.int32()))


def _any(expressions: list[pc.Expression]) -> pc.Expression:
    return functools.reduce(operator.or_, expressions)


def _above(floors: dict[Key, int]) -> pc.Expression:
    """Runs of the partitions ``floors`` names that reach at or above its offset there (the
    lowest end offset of its followed changes: no run below can be suspected)."""
    return _any([_of(k) & (pc.field("offset") + pc.field("count") > pa.scalar(f, pa.int64()))
                 for k, f in floors.items()])


#: a successful run of the ledger: placed in the log, no error
_PLACED = pc.field("error_name").is_null() & pc.field("offset").is_valid()
#: the pieces the ledger's tail took in since it last combined them (one a commit): combined
#: into one when there are more
_MAX_LOOSE = 256


class _Tail:
    """The ledger's successful runs of the last ``keep`` (back further while a followed
    change needs older ones), held between rounds: read whole once, then only the files
    each commit appended. A newly followed change takes its runs from here at once;
    reading them from the table at the change (a scan of every file of its last minutes,
    2-9 s beside a busy audit in ``bench/latency.py --second-after``) made its suspicions
    wait that long. Every run acknowledged last at or after ``since`` is held (older
    ones may be: a piece is let go once all of its runs are older)."""

    def __init__(self, path: str, keep: timedelta) -> None:
        self.path, self.keep = path, keep
        self.version: int | None = None
        self.since: datetime | None = None
        #: (rows, the oldest and the newest last_ack_time among them, whether combined)
        self.chunks: list[tuple[pa.Table, datetime, datetime, bool]] = []
        self.rebuilt = False  # whether the last advance read the table whole

    def advance(self, now: datetime, need: datetime | None) -> pa.Table | None:
        """Take in what the ledger appended since the last call, held back to ``now -
        keep`` or ``need`` (the oldest a followed change needs), whichever is older: the
        table read whole the first time and when ``need`` is older than what is held. The
        rows taken in (every one held when read whole); None while there is no ledger."""
        floor = now - self.keep if need is None else min(now - self.keep, need)
        self.rebuilt = self.version is None or (need is not None and need < self.since)
        if self.rebuilt:
            if not table_exists(self.path):
                self.version = None
                return None
            version, data = table_dataset(self.path)
            t = data.to_table(columns=_ACK_COLUMNS,
                              filter=_PLACED & (pc.field("last_ack_time") >= _ts(floor)))
            self.chunks, self.since = [], floor
        else:
            version, files, _rows = files_added_since(self.path, self.version)
            t = read_files(files, "acks", _ACK_COLUMNS, _PLACED)
        self.version = version
        if t.num_rows:
            lo, hi = pc.min_max(t.column("last_ack_time")).values()
            self.chunks.append((t, lo.as_py(), hi.as_py(), self.rebuilt))
        self._trim(floor)
        return t

    def _trim(self, floor: datetime) -> None:
        """Let go of the pieces whose runs were all acknowledged before ``floor``, and
        combine the pieces taken in one by one into one when there are more than
        :data:`_MAX_LOOSE`. A piece is not cut: cutting a combined one each round would
        copy it each round. So the tail holds its window and what its oldest piece spans
        beyond it: a whole read's piece, up to the window again (twice the window in all,
        until it goes); a combined one, about ``_MAX_LOOSE`` commits."""
        self.chunks = [c for c in self.chunks if c[2] >= floor]
        self.since = max(self.since, floor)
        loose = [c for c in self.chunks if not c[3]]
        if len(loose) > _MAX_LOOSE:
            one = (pa.concat_tables([c[0] for c in loose]).combine_chunks(),
                   min(c[1] for c in loose), max(c[2] for c in loose), True)
            self.chunks = [c for c in self.chunks if c[3]] + [one]

    def rows(self, where: pc.Expression) -> pa.Table:
        """The runs held that match ``where``."""
        if not self.chunks:
            return arrow_schema("acks").empty_table().select(_ACK_COLUMNS)
        return pa.concat_tables([c[0] for c in self.chunks]).filter(where)


class Marker:
    """Rounds of marking (:meth:`round`); what it keeps between them: the changes it
    follows, the partitions' leaderships, the followed partitions' acknowledged runs and
    the seqs already suspected."""

    def __init__(self, settings: Settings) -> None:
        self.events_path = settings.table_path("cluster_events")
        self.acks_path = settings.table_path("acks")
        self.path = settings.table_path("suspicions")
        self.follow = timedelta(seconds=settings.audit.suspect_follow_seconds)
        self.lookback = timedelta(seconds=settings.audit.suspect_lookback_seconds)
        self.events_version: int | None = None
        #: per partition: each change with the time it is followed until
        self.changes: dict[Key, dict[EpochEnd, datetime]] = defaultdict(dict)
        self.leaders: dict[Key, list[Leadership]] = defaultdict(list)
        #: per partition: every change whose answer was read (where an old leader's next
        #: epoch begins, when it leads again)
        self.known: dict[Key, set[EpochEnd]] = defaultdict(set)
        #: the ledger's successful runs of the last ``follow + 2 * lookback``: what a
        #: change at any moment this marker may still read it needs
        self.tail = _Tail(self.acks_path, self.follow + 2 * self.lookback)
        self.runs: dict[Key, list[AckRun]] = {}  # followed partitions' successful runs
        self.floors: dict[Key, int] = {}  # the offset above which ``runs`` were read
        self.since: datetime | None = None  # the acknowledgement time ``runs`` begin at
        self.taken: dict[Key, Spans] = {}  # followed partitions' suspected seqs
        self.txn: int | None = None

    def round(self, now: datetime | None = None) -> int:
        """One round at ``now``: the writes newly suspected (appended to ``suspicions``,
        each marked at ``now`` plus the round's time until then: when it was suspected)."""
        now = now or datetime.now(UTC)
        began = time.monotonic()
        self._read_events(now)
        followed = {k: [c for c, until in cs.items() if now <= until]
                    for k, cs in self.changes.items()}
        followed = {k: sorted(v, key=lambda c: c.changed_at) for k, v in followed.items() if v}
        for k in [k for k in self.changes if k not in followed]:
            del self.changes[k]
        for k in [k for k in self.runs if k not in followed]:
            self.runs.pop(k)
            self.floors.pop(k, None)
            self.taken.pop(k, None)
        self._read_acks(followed, now)
        if not followed:
            return 0
        taken = copy.deepcopy(self.taken)
        found = [s for k, cs in followed.items()
                 for s in suspect(self._ripe(k, cs, now), cs, self.leaders.get(k, []),
                                  taken.setdefault(k, {}), sorted(
                                      self.known[k], key=lambda c: c.changed_at))]
        marked = now + timedelta(seconds=time.monotonic() - began)
        rows = [suspicion_row(s, marked) for s in found]
        if rows:
            self._append(rows)
        self.taken = taken
        n = sum(r["count"] for r in rows)
        if n:
            log.info("suspected %d writes of %d runs in %.2fs (%s)", n, len(rows),
                     time.monotonic() - began, ", ".join(sorted(
                         {f"{r['topic']}-{r['partition']} epoch {r['leader_epoch']} of "
                          f"broker {r['old_leader']} ends at {r['end_offset']}"
                          for r in rows})))
        return n

    def _ripe(self, key: Key, changes: list[EpochEnd], now: datetime) -> list[AckRun]:
        """The partition's runs the rule may take now: those acknowledged before its last
        followed change at once (the fail-over's own writes: the watcher had recorded the
        leaderships before it); a later one (an old leader still acknowledging, or leading
        again) once the watcher has had :data:`RIPE_AFTER` to record a return of the
        leadership before it: a return it has not recorded yet would make the new
        epoch's writes look like the old one's."""
        last = max(c.changed_at for c in changes)
        ripe = now - RIPE_AFTER
        return [a for a in self.runs.get(key, []) if a.first_ack <= last
                or a.first_ack <= ripe]

    def _read_events(self, now: datetime) -> None:
        if self.events_version is None:
            if not table_exists(self.events_path):
                return
            version, data = table_dataset(self.events_path)
            since = now - self.follow - self.lookback
            rows = data.to_table(filter=_KINDS & (pc.field("event_time") >= _ts(since)))
        else:
            version, files, _rows = files_added_since(self.events_path, self.events_version)
            rows = read_files(files, "cluster_events", where=_KINDS)
        self.events_version = version
        for r in rows.to_pylist():
            key = (r["topic"], r["partition"])
            change = epoch_end_of(r)
            if change is not None:
                self.known[key].add(change)
                # followed from its answer, or from when this marker first read it (one
                # that could not run meanwhile follows it anew): what the ledger holds of
                # it by then is suspected
                read = max(r["event_time"].astimezone(UTC), now)
                self.changes[key].setdefault(change, read + self.follow)
            elif (ls := leadership_of(r)) is not None:
                self.leaders[key].append(ls)
        horizon = now - self.follow - self.lookback
        for key, ends in list(self.known.items()):
            self.known[key] = {c for c in ends if c.changed_at >= horizon}
        for key, ls in list(self.leaders.items()):
            kept = [x for x in ls if x.at >= horizon]
            if kept:
                self.leaders[key] = kept
            else:
                del self.leaders[key]

    def _read_acks(self, followed: dict[Key, list[EpochEnd]], now: datetime) -> None:
        """Bring the ledger's tail up to date (:class:`_Tail`), then the followed
        partitions' runs: those of a newly followed partition (or one whose lowest end
        offset fell) taken from the tail at once, the others given the rows appended since
        the last round."""
        floors = {k: min(c.end_offset for c in cs) for k, cs in followed.items()}
        since = min((c.changed_at for cs in followed.values() for c in cs),
                    default=None)
        if since is not None:
            since -= self.lookback
        added = self.tail.advance(now, since)
        if added is None:
            return  # no ledger yet
        if self.tail.rebuilt or (since is not None and self.since is not None
                                 and since < self.since):  # or an older change (late): anew
            self.runs, self.floors = {}, {}
        new = [k for k in followed if k not in self.runs or floors[k] < self.floors[k]]
        held = {k: self.floors[k] for k in followed if k not in new}
        if since is not None and self.since is not None and since > self.since:
            for k in held:  # the oldest change followed went: so do runs before its lookback
                self.runs[k] = [a for a in self.runs[k] if a.last_ack >= since]
        self.since = since
        if held and added.num_rows:
            for r in added.filter(_above(held) & (pc.field("last_ack_time") >= _ts(since))
                                  ).to_pylist():
                self.runs[(r["topic"], r["partition"])].append(ack_run_of(r))
        if new:
            t = self.tail.rows(_above({k: floors[k] for k in new})
                               & (pc.field("last_ack_time") >= _ts(since)))
            for k in new:
                self.runs[k], self.floors[k] = [], floors[k]
            for r in t.to_pylist():
                self.runs[(r["topic"], r["partition"])].append(ack_run_of(r))
            self._seed(new, since)

    def _seed(self, keys: list[Key], since: datetime) -> None:
        """The seqs ``suspicions`` holds already for the partitions ``keys``."""
        for k in keys:
            self.taken[k] = {}
        if not keys or not table_exists(self.path):
            return
        had = read_table(self.path, "suspicions", ["topic", "partition", "producer_id",
                                                   "run_id", "seq", "count"],
                         _any([_of(k) for k in keys])
                         & (pc.field("last_ack_time") >= _ts(since)))
        for r in had.to_pylist():
            self.taken[(r["topic"], r["partition"])].setdefault(
                (r["producer_id"], r["run_id"]), []).append((r["seq"], r["seq"] + r["count"]))

    def _append(self, rows: list[dict]) -> None:
        if self.txn is None:
            self.txn = transaction_version(self.path, APP_ID) or 0
        if not append_once(self.path, "suspicions", rows, APP_ID, self.txn + 1):
            raise RuntimeError(f"{self.path}: transaction {self.txn + 1} of {APP_ID} was "
                               f"committed by another marker (two services on one "
                               f"warehouse?): begun afresh")
        self.txn += 1


def run_marker(settings: Settings, stop: threading.Event) -> None:
    """Rounds every ``audit.suspect_seconds`` until ``stop``. A round that fails (the store
    out of reach) is ridden out as every component does (:class:`~kafka_audit.status.Outage`:
    a line when it starts and one when it ends, a capped backoff, its status file) and
    begins afresh: the next round reads the
    recent changes and what it follows again and seeds from the table, so nothing is
    suspected twice. Reports that reach the ledger after a change's follow window (a
    producer spooling through a long outage) are not suspected: the read after settle
    judges them as always."""
    marker = Marker(settings)
    outage = Outage("suspicions", StatusWriter(settings.home_dir, "suspicions"), log,
                    settings.outage.retry_seconds, settings.outage.max_backoff_seconds)
    while not stop.is_set():
        wait = settings.audit.suspect_seconds
        try:
            marker.round()
            outage.succeeded()
        except Exception as exc:  # noqa: BLE001 - the store or a race: begun afresh
            wait = outage.failed(exc)
            marker = Marker(settings)
        stop.wait(wait)
