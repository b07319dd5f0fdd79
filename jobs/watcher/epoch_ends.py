"""Where the old leader's epoch ends, asked of the partition's leader at each leader change.

When another broker leads a partition, the new leader's log for the previous leader epoch
ends at a known offset (KIP-101's ``OffsetForLeaderEpoch``, the answer a follower
truncates by). Every write the old leader acknowledged in that epoch at or above that
offset is not in the new leader's log: the old leader truncates it when it rejoins. So
the loss is certain at the fail-over, before any read (``tests/cluster/test_epoch_end.py``
shows it exactly on a real ``acks=1`` leader kill).

:class:`EpochEnds` follows the watcher's rows (from the metadata log or the polls): each
row that names a leader other than the partition's last one, at a newer epoch, is a
question: "where does epoch E (the old leader's) end?". The watcher asks the partition's
leader (``broker_views.epoch_ends``) at each poll until it answers, or until
``GIVE_UP_SECONDS`` have passed; each answer is an ``epoch_end`` row of
``cluster_events``: ``previous_leader`` the old leader, ``leader_epoch`` its epoch,
``log_end`` the end offset, ``leader`` the broker that answered; ``detail`` the epoch the
answer is for (the largest the answering log holds at or below E), the new leader and
epoch, and the change's time. A change the watcher did not see (it was down) asks
nothing: the read still finds its losses.

:meth:`EpochEnds.follow` and :func:`question_of` are pure; :meth:`EpochEnds.ask` does the
round trips.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from kafka_audit.schemas.events import EPOCH_END, FIRST_SEEN, LEADER_CHANGES

__all__ = ["Question", "question_of", "EpochEnds", "GIVE_UP_SECONDS"]

log = logging.getLogger(__name__)

#: a question not answered by then is given up (said once); the read still judges
GIVE_UP_SECONDS = 120.0


@dataclass(frozen=True)
class Question:
    """Where does ``epoch`` (led by ``old_leader``) end? Asked after the change at
    ``changed_at`` to ``new_leader`` at ``new_epoch``."""

    topic: str
    partition: int
    old_leader: int
    epoch: int
    new_leader: int
    new_epoch: int
    changed_at: datetime


def question_of(row: dict, last: tuple[int, int] | None) -> Question | None:
    """The question a ``cluster_events`` row raises, given the partition's last leader and
    epoch (``last``; None: not known): one when the row names another leader at a newer
    epoch, else none."""
    if row.get("kind") not in LEADER_CHANGES or last is None:
        return None
    leader, epoch = row.get("leader"), row.get("leader_epoch")
    if leader is None or leader < 0 or epoch is None:
        return None
    old_leader, old_epoch = last
    if leader == old_leader or epoch <= old_epoch:
        return None
    return Question(row["topic"], row["partition"], old_leader, old_epoch, leader, epoch,
                    row["event_time"])


class EpochEnds:
    """The questions of the leader changes seen, and their answers as rows."""

    def __init__(self) -> None:
        #: partition -> (leader, epoch): its last leader that was a broker, at that epoch
        self.leaders: dict[tuple[str, int], tuple[int, int]] = {}
        self.pending: list[Question] = []
        self.answered = self.given_up = 0

    def seed(self, key: tuple[str, int], leader: int, epoch: int | None) -> None:
        """A partition seen for the first time (a poll's view): its leader and epoch, so
        that its first change raises a question (a quiet replay of the log writes none)."""
        if key not in self.leaders and leader >= 0 and epoch is not None:
            self.leaders[key] = (leader, epoch)

    def follow(self, rows: list[dict]) -> None:
        """Take the watcher's new rows (in their order): leaders and their epochs, and the
        questions of the changes."""
        for r in rows:
            if r.get("partition", -1) < 0 or r.get("kind") not in (*LEADER_CHANGES,
                                                                    FIRST_SEEN):
                continue
            key = (r["topic"], r["partition"])
            q = question_of(r, self.leaders.get(key))
            if q is not None:
                self.pending.append(q)
            leader, epoch = r.get("leader"), r.get("leader_epoch")
            if leader is not None and leader >= 0 and epoch is not None and (
                    key not in self.leaders or epoch >= self.leaders[key][1]):
                self.leaders[key] = (leader, epoch)

    def ask(self, brokers: dict[int, tuple[str, int]],
            leaders: dict[tuple[str, int], tuple[int, int]], now: datetime, ask_one,
            budget: float) -> list[dict]:
        """Ask the pending questions now with ``ask_one(host, port, wanted, timeout)``; the
        rows of the answers. Each is asked of the partition's leader as the polls see it
        (``leaders``: partition -> (leader, epoch)) when that view is at the change's epoch
        or newer, else of the change's new leader; never of the old leader at the old
        epoch (it would answer with its own log). One question per partition a round (the
        request names a partition once). Unanswered questions stay pending until
        ``GIVE_UP_SECONDS``."""
        if not self.pending:
            return []
        by_broker: dict[int, list[Question]] = {}
        asked: set[tuple[str, int]] = set()
        for q in self.pending:
            key = (q.topic, q.partition)
            if key in asked:
                continue  # the next round: a request names each partition once
            asked.add(key)
            leader, epoch = leaders.get(key, (-1, -1))
            b = leader if leader >= 0 and epoch >= q.new_epoch else q.new_leader
            by_broker.setdefault(b, []).append(q)
        rows, answered = [], set()
        for b, questions in sorted(by_broker.items()):
            answers = {}
            if b in brokers:
                try:
                    answers = ask_one(*brokers[b], {(q.topic, q.partition): q.epoch
                                                    for q in questions}, budget)
                except Exception as exc:  # noqa: BLE001 - not answered: asked again
                    log.debug("epoch end: broker %s did not answer: %s", b, exc)
            for q in questions:
                a = answers.get((q.topic, q.partition))
                if a is not None and a.error == 0 and 0 <= a.leader_epoch <= q.epoch \
                        and a.end_offset >= 0:
                    rows.append(_row(q, b, a, now))
                    answered.add(q)
                    self.answered += 1
        left = []
        for q in self.pending:
            if q in answered:
                continue
            if (now - q.changed_at).total_seconds() > GIVE_UP_SECONDS:
                self.given_up += 1
                log.warning("epoch end of %s-%d epoch %d not answered in %.0f s", q.topic,
                            q.partition, q.epoch, GIVE_UP_SECONDS)
            else:
                left.append(q)
        self.pending = left
        return rows


def _row(q: Question, broker: int, answer, now: datetime) -> dict:
    return {"event_time": now, "topic": q.topic, "partition": q.partition, "kind": EPOCH_END,
            "leader": broker, "previous_leader": q.old_leader, "leader_epoch": q.epoch,
            "log_end": answer.end_offset, "source": "watcher:epoch_end",
            "detail": json.dumps({"answered_epoch": answer.leader_epoch,
                                  "new_leader": q.new_leader, "new_epoch": q.new_epoch,
                                  "changed_at": q.changed_at.isoformat()})}
