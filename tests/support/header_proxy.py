"""An HTTP proxy on loopback in front of an S3 server, a thread of the test. It drops the
conditional headers (``If-None-Match``, ``If-Match``) of every request (a store that
ignores conditional writes, to show what the commit probe says of one), or passes them
and calls ``before(method, path)`` ahead of each request (another writer acting at the
worst moment)."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Callable

__all__ = ["StrippingProxy"]

_HOP = {"connection", "transfer-encoding"}
_CONDITIONAL = {"if-none-match", "if-match"}


class StrippingProxy:
    def __init__(self, backend_port: int, strip: bool = True,
                 before: Callable[[str, str], None] | None = None) -> None:
        backend = backend_port
        dropped = _HOP | (_CONDITIONAL if strip else set())

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _body(self) -> bytes | None:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    parts = []
                    while (size := int(self.rfile.readline().split(b";")[0].strip(), 16)):
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else None

            def _forward(self) -> None:
                body = self._body()
                if before is not None:
                    before(self.command, self.path)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection("127.0.0.1", backend, timeout=60)
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                conn.close()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", answer.getheader("Content-Length", "0")
                                 if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StrippingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
