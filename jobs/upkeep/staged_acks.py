"""The committer of staged acks: the service's side of ``producer.ledger_commits: staged``.

Producer hosts (the Python ledger, the plugin's shipper) hand each spooled segment over as
an object in ``acks/_staged/<app id>/<version>.arrow`` (``store.stage_segment``) instead of
committing it themselves. Once every ``producer.staged_commit_seconds`` this loop commits
everything staged in one Delta commit that records each app id's newest version as its
transaction, then deletes what it committed (``store.commit_staged``): however many hosts
write, the ``acks`` table takes one commit a second, and none of them races another for a
version. A crash between the commit and the deletes leaves segments that the next round
finds at or below their app's version and deletes unread: none is appended twice.

The committer must be the only one: two services on one warehouse would race for each
commit (Delta refuses the second on the apps' transactions; nothing is doubled, but half
the rounds are lost).
"""

from __future__ import annotations

import logging
import threading
import time

from kafka_audit.settings import Settings
from kafka_audit.store import StagedCommit, commit_staged

__all__ = ["run_staged_commits", "StagedCommits"]

log = logging.getLogger(__name__)


class StagedCommits:
    """Rounds of :func:`~kafka_audit.store.commit_staged` on the ``acks`` table, with their
    totals (for the log and the tests)."""

    def __init__(self, settings: Settings) -> None:
        self.path = settings.table_path("acks")
        self.commits = self.segments = self.rows = self.dropped = self.failures = 0
        self.last_error: str | None = None

    def round(self) -> StagedCommit | None:
        """One round; None if it failed (logged; everything stays staged for the next)."""
        try:
            done = commit_staged(self.path, "acks")
        except Exception as exc:  # noqa: BLE001 - the store or a race: the next round retries
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("staged acks not committed (retried in the next round): %s",
                        self.last_error)
            return None
        if done.version is not None:
            self.commits += 1
            self.segments += done.segments
            self.rows += done.rows
            log.debug("committed %d staged segments of %d apps (%d rows) as version %d",
                      done.segments, done.apps, done.rows, done.version)
        self.dropped += done.dropped
        if self.last_error is not None:
            log.info("staged acks committed again")
            self.last_error = None
        return done

    def drain(self, rounds: int = 1000) -> bool:
        """Rounds until nothing is staged (each commits at most ``commit_staged``'s cap);
        False if a round failed or ``rounds`` did not do it."""
        for _ in range(rounds):
            done = self.round()
            if done is None:
                return False
            if done.version is None:
                return True
        return False


def run_staged_commits(settings: Settings, stop: threading.Event) -> None:
    """Commit what producer hosts staged, every ``producer.staged_commit_seconds``, until
    ``stop``; a last round on the way out."""
    committer = StagedCommits(settings)
    every = settings.producer.staged_commit_seconds
    next_at = time.monotonic()
    while not stop.is_set():
        committer.round()
        next_at = max(next_at + every, time.monotonic())
        stop.wait(max(0.0, next_at - time.monotonic()))
    committer.round()
