"""An S3-compatible object store on loopback for the tests, the benchmarks and a demo of a
remote warehouse: s3proxy (Apache-2.0, pinned in ``deploy/maven/s3proxy.pom.xml``) serving
a local folder, with AWS signatures (v2 or v4) checked against a key of its own.

It honours ``If-None-Match: *`` on PUT (a second create of a key is a 412), which is what
keeps concurrent delta-rs writers of one table correct: each writer creates the next
commit file only if it does not exist yet. A store that ignored the header would let two
writers both "win" one version and silently lose a commit (tried here with a proxy that
stripped it: 80 appends reported, 49 kept); ``kafka-audit check`` probes for it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from kafka_audit.jars import ensure_jars
from kafka_audit.scenarios.cluster import wait_until

__all__ = ["S3Server"]

_LOGBACK = """<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="out"/></root>
</configuration>
"""


class S3Server:
    """s3proxy over ``folder`` on ``127.0.0.1:port``: :meth:`start`, :meth:`bucket`,
    :meth:`storage` (the ``storage`` settings that reach it), :meth:`stop`."""

    def __init__(self, folder: Path, port: int, heap_mb: int = 256, signed: bool = True) -> None:
        """``signed`` False: requests are not checked for a signature (a test puts a proxy
        that rewrites requests in front of it)."""
        self.folder, self.port, self.heap_mb, self.signed = Path(folder), port, heap_mb, signed
        self.access_key = "kaudit-test"
        self.secret = "s3-" + secrets.token_hex(16)
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage(self) -> dict:
        return {"endpoint_url": self.endpoint, "path_style": True,
                "access_key_id": self.access_key, "secret_access_key": self.secret}

    def start(self, timeout: float = 120) -> S3Server:
        folder = ensure_jars(("s3proxy",), quiet=True) / "s3proxy"
        data = self.folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        (self.folder / "logback.xml").write_text(_LOGBACK)
        props = self.folder / "s3proxy.properties"
        fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the key
        with os.fdopen(fd, "w") as f:
            f.write("\n".join([
                f"s3proxy.endpoint={self.endpoint}",
                f"s3proxy.authorization={'aws-v2-or-v4' if self.signed else 'none'}",
                f"s3proxy.identity={self.access_key}",
                f"s3proxy.credential={self.secret}",
                "jclouds.provider=filesystem",
                "jclouds.identity=unused",
                "jclouds.credential=unused",
                f"jclouds.filesystem.basedir={data}", ""]))
        log = open(self.folder / "s3proxy.log", "ab")  # noqa: SIM115 - the child's, kept open
        self.proc = subprocess.Popen(
            ["java", f"-Xmx{self.heap_mb}m", "-XX:TieredStopAtLevel=1",
             f"-Dlogback.configurationFile={self.folder / 'logback.xml'}",
             "-cp", f"{folder}/*", "org.gaul.s3proxy.Main", "--properties", str(props)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_until(self._answers, timeout, f"the S3 server on port {self.port}")
        return self

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            tail = (self.folder / "s3proxy.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"s3proxy exited ({self.proc.returncode}):\n{tail}")
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=2)
        except urllib.error.HTTPError:  # 403 without a signature: it answers
            return True
        except OSError:
            return False
        return True

    def bucket(self, name: str) -> str:
        """Create the bucket ``name`` (if it is not there); return ``s3://name``."""
        from pyarrow import fs

        s3 = fs.S3FileSystem(access_key=self.access_key, secret_key=self.secret,
                             endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                             region="us-east-1", allow_bucket_creation=True)
        s3.create_dir(name)
        return f"s3://{name}"

    def stop(self, discard: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        if discard:
            shutil.rmtree(self.folder, ignore_errors=True)
