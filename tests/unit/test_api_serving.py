"""How the API is served (``auditor_api/server.py``, ``guards.AllowedHosts``): HTTPS from the
settings' certificate and key, a refusal to serve an open API beyond loopback, and a 400
for a Host name it does not answer to (DNS rebinding)."""

import datetime as dt
import ipaddress
import signal
import socket
import ssl

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi.testclient import TestClient

from kafka_audit.app import cli
from kafka_audit.app.api_process import start_api_process
from kafka_audit.auditor_api.auth import hash_token, new_token
from kafka_audit.auditor_api.main import create_app
from kafka_audit.auditor_api.server import allowed_hosts, check_exposure, uvicorn_config
from kafka_audit.errors import ConfigError
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.settings import Settings, get_settings

PASSWORD = "correct horse"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed(folder, password: str | None = PASSWORD):
    """A certificate for localhost and 127.0.0.1, and its key (encrypted with ``password``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "api.crt", folder / "api.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption()))
    return cert_file, key_file


def answers(url: str, **kwargs) -> bool:
    try:
        return httpx.get(url, timeout=2, **kwargs).status_code in (200, 503)
    except httpx.HTTPError:
        return False


def test_the_api_serves_https_from_the_settings_certificate_and_encrypted_key(tmp_path):
    cert, key = self_signed(tmp_path)
    port = free_port()
    settings = Settings(home=tmp_path, api={
        "host": "127.0.0.1", "port": port, "tls_cert_file": cert, "tls_key_file": key,
        "tls_key_password": PASSWORD})
    trust = ssl.create_default_context(cafile=str(cert))
    proc = start_api_process(settings)  # the service's own API process, its settings piped
    try:
        wait_until(lambda: answers(f"https://127.0.0.1:{port}/healthz", verify=trust), 60,
                   "the API to answer over HTTPS")
        r = httpx.get(f"https://localhost:{port}/v1/summary", verify=trust, timeout=10)
        assert r.status_code == 200 and r.json()["acked"] == 0
        assert r.url.scheme == "https"
        with pytest.raises(httpx.HTTPError):  # the port speaks TLS only
            httpx.get(f"http://127.0.0.1:{port}/v1/summary", timeout=5)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def test_a_key_that_cannot_be_loaded_is_one_clear_error_never_a_prompt(tmp_path):
    cert, key = self_signed(tmp_path)
    app = create_app(Settings(home=tmp_path))
    for password, hint in ((None, "needs api.tls_key_password"), ("wrong", "cannot be loaded")):
        s = Settings(home=tmp_path, api={"tls_cert_file": cert, "tls_key_file": key,
                                         "tls_key_password": password})
        with pytest.raises(ConfigError, match=hint):
            uvicorn_config(app, s)
    missing = Settings(home=tmp_path, api={"tls_cert_file": tmp_path / "none.crt"})
    with pytest.raises(ConfigError, match="none.crt"):
        uvicorn_config(app, missing)
    (tmp_path / "plain").mkdir()
    plain_cert, plain_key = self_signed(tmp_path / "plain", password=None)
    ok = Settings(home=tmp_path, api={"tls_cert_file": plain_cert, "tls_key_file": plain_key})
    assert uvicorn_config(app, ok).ssl_certfile == str(plain_cert)


def test_an_open_api_beyond_loopback_is_refused_unless_allowed(tmp_path):
    open_wide = Settings(home=tmp_path, api={"host": "0.0.0.0"})
    with pytest.raises(ConfigError, match="allow_open"):
        check_exposure(open_wide.api)
    for host in ("10.1.2.3", "audit.example.com", "::", ""):
        with pytest.raises(ConfigError):
            check_exposure(open_wide.api, host)
    for host in ("127.0.0.1", "127.0.0.9", "localhost", "::1", "[::1]"):
        check_exposure(open_wide.api, host)  # loopback: served open (the local demo)
    check_exposure(Settings(home=tmp_path, api={"host": "0.0.0.0", "allow_open": True}).api)
    token = {"name": "t", "hash": hash_token(new_token())}
    check_exposure(Settings(home=tmp_path, api={"host": "0.0.0.0", "tokens": [token]}).api)


def test_kafka_audit_serve_refuses_to_start_open_on_every_interface(tmp_path, monkeypatch,
                                                                    capsys):
    import uvicorn

    served: list = []
    # never bind here: a server that would start records its address instead
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: served.append(
        self.config.host))
    monkeypatch.setenv("KAFKA_AUDIT_HOME", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert cli.main(["serve", "--host", "0.0.0.0", "--port", str(free_port())]) == 2
        assert "allow_open" in capsys.readouterr().err and served == []
        monkeypatch.setenv("KAFKA_AUDIT_API__ALLOW_OPEN", "true")
        get_settings.cache_clear()
        cli.main(["serve", "--host", "0.0.0.0", "--port", str(free_port())])
        assert served == ["0.0.0.0"]  # said explicitly: served
    finally:
        get_settings.cache_clear()


def test_the_services_api_process_refuses_an_open_api_beyond_loopback(tmp_path):
    settings = Settings(home=tmp_path, api={"host": "0.0.0.0", "port": free_port()})
    proc = start_api_process(settings)
    try:
        assert proc.wait(60) == 2  # exits at once, having bound nothing
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_host_name_the_api_does_not_answer_to_is_a_400(tmp_path):
    app = create_app(Settings(home=tmp_path))
    rebound = TestClient(app, base_url="http://attacker.example:8088")
    r = rebound.get("/v1/summary")
    assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"
    assert "attacker.example" in r.json()["detail"] and "api.allowed_hosts" in r.json()["detail"]
    assert rebound.get("/dashboard").status_code == 400
    assert rebound.get("/healthz").status_code != 400  # probes address a container by its IP
    for base in ("http://localhost:8088", "http://127.0.0.1:8088", "http://[::1]:8088"):
        assert TestClient(app, base_url=base).get("/v1/summary").status_code == 200, base
    assert TestClient(app).get("/v1/summary").status_code == 400  # "testserver" is no name

    named = create_app(Settings(home=tmp_path, api={
        "allowed_hosts": ["audit.example.com", "*.corp.example"]}))
    assert TestClient(named, base_url="http://audit.example.com").get(
        "/v1/summary").status_code == 200
    assert TestClient(named, base_url="http://a.corp.example").get(
        "/v1/summary").status_code == 200
    assert TestClient(named, base_url="http://localhost").get(
        "/v1/summary").status_code == 400  # the list replaces the defaults


def test_the_default_names_follow_the_bind_address(tmp_path):
    def names(host):
        return allowed_hosts(Settings(home=tmp_path, api={"host": host}).api)

    assert names("127.0.0.1") == ["localhost", "127.0.0.1", "[::1]"]
    assert names("10.1.2.3")[-1] == "10.1.2.3"
    assert names("fd00::5")[-1] == "[fd00::5]"
    assert names("0.0.0.0")[-1] == socket.gethostname().lower()
    assert "0.0.0.0" not in names("0.0.0.0")
    # a configured IPv6 address is matched as a Host header carries it, in brackets
    assert allowed_hosts(Settings(home=tmp_path, api={"allowed_hosts": ["::1", "A.example"]})
                         .api) == ["[::1]", "a.example"]


def test_an_unsafe_setting_is_refused_when_loaded(tmp_path):
    with pytest.raises(ValueError, match="tls_cert_file"):
        Settings(home=tmp_path, api={"tls_key_file": tmp_path / "k"})
    with pytest.raises(ValueError, match="host name pattern"):
        Settings(home=tmp_path, api={"allowed_hosts": ["a*.example.com"]})

