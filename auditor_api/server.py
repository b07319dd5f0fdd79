"""How the API is served: on which address it may listen, which names it answers to, TLS.

* **Exposure.** Bound beyond loopback with no ``api.tokens``, anyone who reaches the
  address reads the audit: :func:`check_exposure` refuses to start so
  (:class:`~kafka_audit.errors.ConfigError`, ``kafka-audit serve`` and ``run`` exit 2)
  unless ``api.allow_open: true`` says it is meant.
* **Names** (:func:`allowed_hosts`). A page on another site can rename its own host to
  this API's address (DNS rebinding) and then read an open local API from the victim's
  browser: its requests carry the page's host name. The app answers only the names
  configured in ``api.allowed_hosts`` (by default loopback's and the bind address;
  ``guards.AllowedHosts``).
* **TLS.** ``api.tls_cert_file`` / ``tls_key_file`` / ``tls_key_password`` go to uvicorn's
  ``ssl_certfile`` / ``ssl_keyfile`` / ``ssl_keyfile_password``; :func:`uvicorn_config`
  loads them before the server starts, so a wrong file or password is one clear error.

``kafka-audit serve`` (``cli.py``) and the service's API process (``api_process.py``)
both build their server with :func:`uvicorn_config`.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from typing import Any

from kafka_audit.errors import ConfigError
from kafka_audit.settings import bracketed

__all__ = ["LOOPBACK_HOSTS", "is_loopback", "check_exposure", "check_serving",
           "allowed_hosts", "uvicorn_config"]

#: the names a request to a loopback address carries (IPv6 in brackets, as in a Host header)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_EVERY_INTERFACE = ("", "0.0.0.0", "::", "[::]")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only: ``localhost`` or a loopback
    address (127.0.0.0/8, ::1); any other name or address is beyond it."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def check_exposure(api, host: str | None = None) -> None:
    """Raise :class:`ConfigError` when the API would serve the audit to anyone who reaches
    ``host`` (default ``api.host``): bound beyond loopback, no token configured, and
    ``api.allow_open`` not set."""
    host = api.host if host is None else host
    if api.tokens or api.allow_open or is_loopback(host):
        return
    raise ConfigError(
        f"the API would be open on {host or 'every interface'}: no api.tokens are "
        f"configured, so anyone who reaches it reads the audit. Add a token "
        f"(`kafka-audit token new`), bind to 127.0.0.1 (api.host), or set "
        f"api.allow_open: true if an open API on this address is meant")


def allowed_hosts(api, host: str | None = None) -> list[str]:
    """The Host header names served: ``api.allowed_hosts`` if set, else loopback's names
    and the bind address ``host`` (default ``api.host``; bound to every interface, the
    machine's host name)."""
    if api.allowed_hosts is not None:
        return list(api.allowed_hosts)
    host = (api.host if host is None else host).strip().lower()
    names = list(LOOPBACK_HOSTS)
    if host in _EVERY_INTERFACE:
        extra = socket.gethostname().lower()  # no DNS lookup: offline sites start too
    else:
        extra = bracketed(host.strip("[]"))
    if extra and extra not in names:
        names.append(extra)
    return names


def _load_tls(api) -> None:
    """Load the certificate, key and password as uvicorn will, now: one clear error instead
    of a traceback when the server starts, and never OpenSSL's password prompt (an
    encrypted key without api.tls_key_password is refused, not asked for on a terminal)."""
    password = api.tls_key_password.get_secret_value() if api.tls_key_password else ""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
            api.tls_cert_file, api.tls_key_file, password=lambda: password)
    except (OSError, ValueError) as exc:  # missing file, not PEM, wrong or no password
        hint = "" if password else " (an encrypted key needs api.tls_key_password)"
        raise ConfigError(f"the API's TLS certificate or key cannot be loaded "
                          f"(api.tls_cert_file {api.tls_cert_file}, api.tls_key_file "
                          f"{api.tls_key_file}): {exc}{hint}") from exc


def check_serving(api, host: str | None = None) -> None:
    """Raise :class:`ConfigError` if the API cannot be served as ``api`` says on ``host``
    (default ``api.host``): an exposure refused (:func:`check_exposure`), or a TLS
    certificate, key or password that cannot be loaded. ``kafka-audit run`` asks before it
    starts anything."""
    check_exposure(api, host)
    if api.tls_cert_file is not None:
        _load_tls(api)


def uvicorn_config(app: Any, settings, *, host: str | None = None, port: int | None = None,
                   **options: Any):
    """uvicorn's configuration serving ``app`` on ``host``:``port`` (default ``api.host``
    and ``api.port``), over TLS when ``api.tls_cert_file`` is set; :func:`check_serving`
    first."""
    import uvicorn

    api = settings.api
    host = api.host if host is None else host
    check_serving(api, host)
    tls: dict[str, Any] = {}
    if api.tls_cert_file is not None:
        tls = {"ssl_certfile": str(api.tls_cert_file),
               "ssl_keyfile": str(api.tls_key_file) if api.tls_key_file else None,
               "ssl_keyfile_password": api.tls_key_password.get_secret_value()
               if api.tls_key_password else None}
    config = uvicorn.Config(app, host=host, port=api.port if port is None else port,
                            root_path=api.root_path, **tls, **options)
    return config
