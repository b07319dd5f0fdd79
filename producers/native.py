"""The native ack path from Python: the ``kaudit`` librdkafka plugin (``producers/plugin/``).

:func:`load_plugin` builds the plugin once (``kafka_audit/jars.py``'s cached builds) and
makes the librdkafka that confluent-kafka's wheel bundles visible to it: the plugin is
built without linking librdkafka, so its ``rd_kafka_*`` symbols must resolve from the
library already in the process, which the wheel loads with local symbol scope. Promoting
it with ``RTLD_GLOBAL`` before the first client loads the plugin is what makes
``plugin.library.paths`` work there (FIELD-NOTES: librdkafka interceptor plugins).

:func:`plugin_properties` is the configuration a producer needs, :class:`SpoolState`
reads the counters the plugin keeps in its spool folder (what was stamped, acked,
failed) and asks it to close its open runs for the shipper
(``producers/shipper.py``).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import re
import struct
import time
from pathlib import Path

from kafka_audit.errors import AuditorError

__all__ = ["PluginUnavailable", "NativeFallbackWarning", "load_plugin", "plugin_properties",
           "spool_folder_name", "native_spool_root", "SpoolState", "promote_librdkafka",
           "librdkafka_path"]


class PluginUnavailable(AuditorError):
    """Raised when the native plugin cannot be built or loaded here (no gcc, no librdkafka
    headers, an untested librdkafka version); says why."""

    code = "plugin"


class NativeFallbackWarning(RuntimeWarning):
    """Warned when ``AuditedProducer`` falls back to the pure-Python path."""


def spool_folder_name(producer_id: str, run_id: str) -> str:
    """The plugin's spool folder for a producer run (``producers/plugin/kaudit.c``: bytes
    outside ``[A-Za-z0-9._-]`` become ``_``, each id cut to 100 bytes)."""
    def clean(value: str) -> str:
        raw = value.encode()[:100]
        return re.sub(rb"[^A-Za-z0-9._-]", b"_", raw).decode()

    return f"{clean(producer_id)}_{clean(run_id)}"


def native_spool_root(settings) -> Path:
    """Where the plugin spools for this installation (``kaudit.spool.dir``), and where
    ``kafka-audit ship`` looks by default: the plugin's own default when
    ``KAFKA_AUDIT_HOME`` names the same home."""
    return Path(settings.home_dir) / "spool" / "native"


@functools.cache
def librdkafka_path() -> str:
    """The librdkafka that confluent-kafka loaded (its wheel bundles its own)."""
    import confluent_kafka  # noqa: F401 - loads cimpl, and with it librdkafka

    with open("/proc/self/maps") as maps:
        found = re.search(r"(/\S*librdkafka[^/\s]*\.so[^\s/]*)\s*$", maps.read(), re.M)
    if found is None:
        raise PluginUnavailable("confluent-kafka's librdkafka is not among the loaded "
                                "libraries (/proc/self/maps)")
    return found.group(1)


def promote_librdkafka() -> str:
    """Put the librdkafka that confluent-kafka loaded into the global symbol scope; return
    its path."""
    path = librdkafka_path()
    ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    return path


@functools.cache
def load_plugin() -> Path:
    """The plugin library, built if needed, with librdkafka promoted so that it loads;
    :class:`PluginUnavailable` (with the reason) if either cannot be done."""
    from kafka_audit.errors import JarsMissing
    from kafka_audit.jars import plugin_library

    try:
        path = plugin_library(quiet=True)
    except JarsMissing as exc:
        raise PluginUnavailable(f"cannot build the kaudit plugin: {exc.message}") from None
    promote_librdkafka()
    return path


def plugin_properties(plugin: Path, spool_root: Path, producer_id: str, run_id: str,
                      fsync_ms: int | None = None, key_file: Path | None = None
                      ) -> dict[str, str]:
    """The librdkafka properties that load the plugin for one producer run (``key_file``:
    the stamp key's, ``stamp.key_file``: a MAC beside every stamp)."""
    props = {"plugin.library.paths": str(plugin), "kaudit.producer.id": producer_id,
             "kaudit.run.id": run_id, "kaudit.spool.dir": str(spool_root)}
    if fsync_ms is not None:
        props["kaudit.spool.fsync.ms"] = str(fsync_ms)
    if key_file is not None:
        props["kaudit.stamp.key.file"] = str(key_file)
    return props


class SpoolState:
    """The plugin's ``state`` file of one spool folder, mapped: counters and the close
    handshake (``struct kstate`` in ``kaudit.c``)."""

    _FIELDS = {"sent": 16, "acked": 24, "failed": 32, "unstamped": 40, "close_req": 48,
               "close_done": 56, "syncs": 72, "dropped": 80, "unspanned": 88}
    #: ``struct kdrop``: state, partition, first and last seq, count, first and last ack
    #: time (µs), the topic (NUL-terminated); 16 of them from byte 96
    _DROP = struct.Struct("<Iiqqqqq128s")
    _DROPS_AT, _DROPS = 96, 16
    DROP_OPEN, DROP_CLOSED = 1, 2

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / "state"
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        if self._map[:8] != b"KAUDSTA1":
            self._map.close()
            raise PluginUnavailable(f"{self.path} is not a kaudit state file")

    def _u64(self, name: str) -> int:
        return struct.unpack_from("<Q", self._map, self._FIELDS[name])[0]

    def __getattr__(self, name: str) -> int:
        if name in SpoolState._FIELDS:
            return self._u64(name)
        raise AttributeError(name)

    def drop_spans(self, include_open: bool = False) -> list[dict]:
        """The plugin's spans of reports it could not record (``struct kdrop``), in slot
        order: the closed ones (a prefix, never changed again), and with ``include_open``
        the open ones too (once the producer is gone nothing changes)."""
        out = []
        for i in range(self._DROPS):
            (state, partition, first_seq, last_seq, count, first_us, last_us,
             topic) = self._DROP.unpack_from(self._map, self._DROPS_AT + i * self._DROP.size)
            if state == 0 or (state == self.DROP_OPEN and not include_open):
                break
            out.append({"topic": topic.split(b"\0", 1)[0].decode("utf-8", "replace"),
                        "partition": partition, "first_seq": first_seq, "last_seq": last_seq,
                        "reports": count, "first_us": first_us, "last_us": last_us})
        return out

    @property
    def segment(self) -> int:
        return struct.unpack_from("<I", self._map, 64)[0]

    @property
    def closed(self) -> bool:
        """True once the producer is gone (no record changes any more)."""
        return struct.unpack_from("<I", self._map, 68)[0] == 1

    def request_close(self, timeout: float = 1.0) -> bool:
        """Ask the plugin to close every open run; True once it has (within ``timeout``)."""
        want = self._u64("close_req") + 1
        struct.pack_into("<Q", self._map, self._FIELDS["close_req"], want)
        deadline = time.monotonic() + timeout
        while self._u64("close_done") < want:
            if self.closed:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)  # the plugin's spool thread looks every 5 ms
        return True

    def close(self) -> None:
        self._map.close()
