"""Network faults on loopback with iptables: real packets dropped, not a simulation.

``drop_responses(port)`` silently drops every TCP segment a broker sends from
its client port, for as long as the context lasts: requests still arrive and
are applied (records appended), but no response gets back, so clients time
out and retry. That is the classic way a producer without idempotence writes
a record twice. The rule is removed on exit, whatever happens inside.

Needs root and the ``iptables`` command (``bash dev.sh setup`` installs it).
Only loopback is touched: ``-o lo`` and the cluster's own port.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from kafka_audit.errors import ClusterError

__all__ = ["drop_responses"]


def _iptables(action: str, rule: list[str]) -> None:
    exe = shutil.which("iptables")
    if exe is None:
        raise ClusterError("iptables is not installed (bash dev.sh setup installs it)")
    done = subprocess.run([exe, "-w", action, *rule], capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterError(f"iptables {action} {' '.join(rule)} failed: {done.stderr.strip()}")


@contextmanager
def drop_responses(port: int) -> Iterator[None]:
    """Drop what the broker listening on loopback ``port`` sends, until the block ends."""
    rule = ["OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(port), "-j", "DROP"]
    _iptables("-A", rule)
    try:
        yield
    finally:
        _iptables("-D", rule)
