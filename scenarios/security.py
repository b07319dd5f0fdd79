"""What the local cluster's secured listener needs: certificates, SCRAM users, ACLs.

With ``cluster.secure`` on, each node gets a fourth listener, ``SECURE``
(SASL_SSL, SCRAM-SHA-512, ACLs enforced by KRaft's ``StandardAuthorizer``), so
tests can audit a secured cluster. Everything lives in ``<home>/kafka/security/``
(a 0700 folder, every file 0600):

* ``ca.pem`` / ``ca.key``: a throw-away CA;
* ``broker-keystore.pem``: the brokers' PKCS#8 private key (unencrypted: Kafka
  accepts that for PEM key stores since 3.2, KAFKA-12703) followed by their
  certificate chain; the certificate names ``IP:127.0.0.1`` and
  ``DNS:localhost``; the brokers trust ``ca.pem``;
* ``client.pem`` / ``client.key``: a client certificate signed by the same CA
  (``CN=<auditor user>``), for mutual-TLS profiles;
* ``<user>.password``: each SCRAM user's random password. It is never logged and
  never put on a command line: the users are created at format time from a
  salted password (``--add-scram SCRAM-SHA-512=[name=..,iterations=..,salt=..,
  saltedpassword=..]``) and upserted again over the PLAINTEXT listener once the
  cluster is up (a cluster formatted before ``secure`` was turned on has none).

The users have roles, named by the settings: ``auditor`` (every permission the
auditor and the tests' instrumented producer need) and ``noread`` (may
describe the cluster and the topics, never read them). :data:`GRANTS` is the
ACL table; :meth:`ClusterSecurity.apply_acls` applies it through a client of
the PLAINTEXT listener, whose principal ``User:ANONYMOUS`` is a super user (as
are the replication and controller listeners'), so nothing else changes.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from kafka_audit.errors import ClusterError

__all__ = ["GRANTS", "Grant", "ClusterSecurity", "SCRAM_MECHANISM", "SUPER_USER"]

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
SUPER_USER = "User:ANONYMOUS"  # the principal of every PLAINTEXT listener
LISTENER = "SECURE"
CLUSTER_RESOURCE = "kafka-cluster"  # the name of Kafka's one CLUSTER resource
CERT_DAYS = 3650


class Grant(NamedTuple):
    """One ACL: ``role`` may do ``operation`` on ``resource`` ``name`` (LITERAL, any host)."""

    role: str
    resource: str  # Kafka's resource type: CLUSTER, TOPIC, GROUP
    name: str
    operation: str  # a confluent_kafka AclOperation name (Kafka's own)


#: confluent_kafka names Kafka's CLUSTER resource type (code 4) after librdkafka: BROKER
_CONFLUENT_NAMES = {"CLUSTER": "BROKER"}


#: The ACL table. ``*`` (literal) is Kafka's wildcard: every topic, every group.
GRANTS: tuple[Grant, ...] = (
    Grant("auditor", "CLUSTER", CLUSTER_RESOURCE, "DESCRIBE"),
    Grant("auditor", "CLUSTER", CLUSTER_RESOURCE, "DESCRIBE_CONFIGS"),
    Grant("auditor", "CLUSTER", CLUSTER_RESOURCE, "IDEMPOTENT_WRITE"),
    Grant("auditor", "TOPIC", "*", "READ"),
    Grant("auditor", "TOPIC", "*", "DESCRIBE"),
    Grant("auditor", "TOPIC", "*", "DESCRIBE_CONFIGS"),
    Grant("auditor", "TOPIC", "*", "WRITE"),  # the tests' instrumented producer
    Grant("auditor", "GROUP", "*", "READ"),
    Grant("auditor", "GROUP", "*", "DESCRIBE"),
    Grant("noread", "CLUSTER", CLUSTER_RESOURCE, "DESCRIBE"),
    Grant("noread", "TOPIC", "*", "DESCRIBE"),
)

ROLES = ("auditor", "noread")


def _write_secret(path: Path, text: str) -> None:
    """Create ``path`` with mode 0600 from the start (no moment readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


class ClusterSecurity:
    """The secured listener's files under ``directory`` and the users named by ``users``
    (role -> user name). Nothing is created until :meth:`ensure`."""

    def __init__(self, directory: Path, users: Mapping[str, str], host: str = "127.0.0.1"):
        missing = set(ROLES) - set(users)
        if missing:
            raise ValueError(f"no user named for the roles {sorted(missing)}")
        self.directory = Path(directory)
        self.users = dict(users)
        self.host = host

    # ---- files ----------------------------------------------------------------------
    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key_file(self) -> Path:
        return self.directory / "ca.key"

    @property
    def broker_keystore_file(self) -> Path:
        """PEM: the brokers' private key, then their certificate and the CA's."""
        return self.directory / "broker-keystore.pem"

    @property
    def truststore_file(self) -> Path:
        return self.ca_file

    @property
    def client_cert_file(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key_file(self) -> Path:
        return self.directory / "client.key"

    def password_file(self, user: str) -> Path:
        if user not in self.users.values():
            raise ValueError(f"{user!r} is not a user of the secured listener")
        return self.directory / f"{user}.password"

    def user(self, role: str) -> str:
        return self.users[role]

    def _password(self, user: str) -> str:
        return self.password_file(user).read_text().strip("\n")

    def _certificate_files(self) -> list[Path]:
        return [self.ca_file, self.ca_key_file, self.broker_keystore_file,
                self.client_cert_file, self.client_key_file]

    # ---- making them ----------------------------------------------------------------
    def ensure(self) -> None:
        """Make whatever is missing: the folder (0700), the certificates (all of them again
        if one is missing: they hang together), a password per user. Idempotent."""
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        if not all(p.exists() for p in self._certificate_files()):
            self._make_certificates()
        for user in self.users.values():
            path = self.password_file(user)
            if not path.exists():
                # URL-safe characters only: StorageTool's --add-scram splits on "," and "="
                _write_secret(path, secrets.token_urlsafe(24) + "\n")

    def _make_certificates(self) -> None:
        if shutil.which("openssl") is None:
            raise ClusterError("the secured listener needs the openssl command "
                               "(apt-get install -y openssl)")
        sans = ["IP:127.0.0.1", "DNS:localhost"]
        if self.host not in ("127.0.0.1", "localhost"):
            sans.insert(0, f"IP:{self.host}")
        # made in a private folder beside the final one, then moved in: never half a set
        with tempfile.TemporaryDirectory(dir=self.directory, prefix=".make-") as tmp:
            t = Path(tmp)
            exts = {
                "ca": "basicConstraints=critical,CA:TRUE\n"
                      "keyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\n",
                "broker": "basicConstraints=critical,CA:FALSE\n"
                          "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                          f"subjectAltName={','.join(sans)}\n",
                "client": "basicConstraints=critical,CA:FALSE\n"
                          "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
            }
            subjects = {"ca": "/CN=kafka-audit local test CA", "broker": "/CN=localhost",
                        "client": f"/CN={self.user('auditor')}"}
            for name, ext in exts.items():
                (t / f"{name}.ext").write_text(ext)
                # EC P-256 keys in PKCS#8 PEM ("BEGIN PRIVATE KEY"), unencrypted
                _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                         "-out", str(t / f"{name}.key"))
                _openssl("req", "-new", "-key", str(t / f"{name}.key"), "-subj", subjects[name],
                         "-out", str(t / f"{name}.csr"))
                signer = (["-signkey", str(t / "ca.key")] if name == "ca" else
                          ["-CA", str(t / "ca.pem"), "-CAkey", str(t / "ca.key")])
                _openssl("x509", "-req", "-in", str(t / f"{name}.csr"), *signer,
                         "-set_serial", str(secrets.randbits(63) + 1),
                         "-days", str(CERT_DAYS), "-sha256", "-extfile", str(t / f"{name}.ext"),
                         "-out", str(t / f"{name}.pem"))
            keystore = ((t / "broker.key").read_text() + (t / "broker.pem").read_text()
                        + (t / "ca.pem").read_text())
            _write_secret(t / "broker-keystore.pem", keystore)
            moves = {"ca.pem": self.ca_file, "ca.key": self.ca_key_file,
                     "broker-keystore.pem": self.broker_keystore_file,
                     "client.pem": self.client_cert_file, "client.key": self.client_key_file}
            for src, dst in moves.items():
                os.chmod(t / src, 0o600)
                os.replace(t / src, dst)

    # ---- the broker's side ------------------------------------------------------------
    def broker_properties(self) -> dict[str, object]:
        """The properties the SECURE listener adds to every node (besides the listener
        itself), and the authorizer that leaves every PLAINTEXT listener a super user."""
        prefix = f"listener.name.{LISTENER.lower()}."
        return {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            # a broker's SASL listener needs a JAAS entry; SCRAM's server side takes no options
            f"{prefix}{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            f"{prefix}ssl.keystore.type": "PEM",
            f"{prefix}ssl.keystore.location": str(self.broker_keystore_file),
            f"{prefix}ssl.truststore.type": "PEM",
            f"{prefix}ssl.truststore.location": str(self.truststore_file),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": False,
            "super.users": SUPER_USER,
        }

    def scram_arguments(self) -> list[str]:
        """StorageTool ``format`` arguments creating every user, from a salted password
        (SCRAM's Hi(), i.e. PBKDF2-HMAC-SHA-512): the password itself is on no command
        line. The same salt for every node, so their bootstrap metadata agree."""
        args = []
        for user in self.users.values():
            salt = secrets.token_bytes(16)
            salted = hashlib.pbkdf2_hmac("sha512", self._password(user).encode(), salt,
                                         SCRAM_ITERATIONS)
            args += ["--add-scram",
                     f"{SCRAM_MECHANISM}=[name={user},iterations={SCRAM_ITERATIONS},"
                     f"salt={base64.b64encode(salt).decode()},"
                     f"saltedpassword={base64.b64encode(salted).decode()}]"]
        return args

    # ---- once the cluster is up (through a PLAINTEXT admin client: a super user) -----
    def upsert_users(self, admin, timeout: float = 30) -> None:
        """Create or reset every user's SCRAM credential from its password file."""
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
        futures = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(u, info, self._password(u).encode())
             for u in self.users.values()], request_timeout=timeout)
        for user, fut in futures.items():
            try:
                fut.result(timeout)
            except Exception as exc:  # the error names the user, never the password
                raise ClusterError(f"could not set the SCRAM credential of {user}: "
                                   f"{type(exc).__name__}") from None

    def bindings(self) -> list:
        """:data:`GRANTS` as confluent_kafka ``AclBinding`` objects for the named users."""
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        return [AclBinding(ResourceType[_CONFLUENT_NAMES.get(g.resource, g.resource)], g.name,
                           ResourcePatternType.LITERAL,
                           f"User:{self.user(g.role)}", "*", AclOperation[g.operation],
                           AclPermissionType.ALLOW) for g in GRANTS]

    def apply_acls(self, admin, timeout: float = 30) -> None:
        """Create every ACL of :data:`GRANTS` (an existing one is left as it is) and return
        once the cluster lists them all."""
        from confluent_kafka.admin import (
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        from kafka_audit.scenarios.cluster import wait_until

        wanted = self.bindings()
        for binding, fut in admin.create_acls(wanted, request_timeout=timeout).items():
            try:
                fut.result(timeout)
            except Exception as exc:
                raise ClusterError(f"could not create the ACL {binding}: {exc}") from None
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None,
                                      None, AclOperation.ANY, AclPermissionType.ANY)

        def listed() -> bool:
            present = set(admin.describe_acls(everything, request_timeout=10).result(15))
            return set(wanted) <= present

        wait_until(listed, timeout, "the secured listener's ACLs to be listed")


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"openssl {args[0]} failed: {proc.stderr.strip()}")
