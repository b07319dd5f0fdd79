"""The project's container image (``deploy/Containerfile``), built and run with podman.

Debian's podman runs here with runc and cgroupfs (crun fails on cgroups in hybrid mode);
it sets a container's open-files and process limits above this machine's hard limits
unless told, which the runtime is not allowed to do, so every run and build passes both
limits at their current values. No image registry is reachable: the base image is made
from Debian's packages with ``debootstrap --variant=minbase bookworm``, slimmed as the
official ``debian:bookworm-slim`` is (:data:`SLIM`), and imported (about 30 s), then the
Containerfile builds on it (``--build-arg BASE``), with the site's extra CA certificates
(``/usr/local/share/ca-certificates``: a TLS-inspecting egress) for its pip and Maven
downloads.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = "localhost/kafka-audit-test-base:bookworm-slim"
#: what the official slim images leave out (debuerreotype's slimify): dpkg's excludes,
#: written into the base so that later installs keep them out too, and applied to what
#: debootstrap installed; the default base of deploy/Containerfile is such an image, so the
#: size the test reports is the one a user's build has
SLIM = ("path-exclude /usr/share/doc/*", "path-include /usr/share/doc/*/copyright",
        "path-exclude /usr/share/groff/*", "path-exclude /usr/share/info/*",
        "path-exclude /usr/share/linda/*", "path-exclude /usr/share/lintian/overrides/*",
        "path-exclude /usr/share/locale/*", "path-exclude /usr/share/man/*")
IMAGE = "localhost/kafka-audit:test"
#: the Containerfile's build stage, kept for its layers
BUILD_STAGE = "localhost/kafka-audit:test-build"
MIRROR = "http://deb.debian.org/debian"
#: the image's user (deploy/Containerfile)
UID = 10001


#: podman as it runs here (runc and cgroupfs: crun fails on this machine's cgroups)
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


def podman(*args: str, timeout: float = 120, check: bool = True
           ) -> subprocess.CompletedProcess:
    proc = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:2])} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


#: processes: podman's own default, which its runtime may set (a value above it, this
#: machine's own limit included, is refused: tried 40,000 to 96,365 on 2026-11-30)
NPROC = 32768


def limits() -> list[str]:
    """Open files at this process's own limits, processes at most :data:`NPROC`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    soft = top if soft == resource.RLIM_INFINITY else soft
    nproc = min(NPROC, *(v for v in resource.getrlimit(resource.RLIMIT_NPROC)
                         if v != resource.RLIM_INFINITY))
    return ["--ulimit", f"nofile={soft}:{top}", "--ulimit", f"nproc={nproc}:{nproc}"]


def exists(image: str) -> bool:
    return podman("image", "exists", image, check=False).returncode == 0


def base_image() -> str:
    """Debian 12 minbase as a local image, made once per machine."""
    if exists(BASE):
        return BASE
    with tempfile.TemporaryDirectory(prefix="debootstrap-") as tmp:
        root = Path(tmp) / "root"
        subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(root), MIRROR],
                       check=True, capture_output=True, timeout=900)
        # what debootstrap leaves behind that no image carries: its downloads
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        slim(root)
        archive = Path(tmp) / "root.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(archive), "."], check=True,
                       capture_output=True, timeout=600)
        podman("import", str(archive), BASE, timeout=600)
    return BASE


def slim(root: Path) -> None:
    """:data:`SLIM` into ``root``'s dpkg configuration, and the files it excludes out of
    ``root`` (folders stay, as after dpkg's own excludes; a package's documentation keeps
    its copyright, as the include says)."""
    (root / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text("\n".join(SLIM) + "\n")
    for verb, pattern in (rule.split() for rule in SLIM):
        if verb != "path-exclude":
            continue
        for top in root.glob(pattern.lstrip("/")):
            for entry in (top.rglob("*") if top.is_dir() and not top.is_symlink() else [top]):
                if (entry.is_file() or entry.is_symlink()) and entry.name != "copyright":
                    entry.unlink()


def extra_ca_certs() -> str:
    folder = Path("/usr/local/share/ca-certificates")
    return "\n".join(p.read_text() for p in sorted(folder.rglob("*.crt"))) \
        if folder.is_dir() else ""


def build_image() -> str:
    """The Containerfile built on the Debian base; podman's layer cache keeps a rebuild of
    an unchanged checkout to seconds, and of a changed one to what follows its sources
    (the build stage is tagged, :data:`BUILD_STAGE`: untagged, the prune below took its
    layers, and every build installed the JDK, Maven and the locked packages again)."""
    base = base_image()
    for target, tag in (("build", BUILD_STAGE), (None, IMAGE)):
        podman("build", *limits(), "--network", "host", "-f", "deploy/Containerfile",
               *(("--target", target) if target else ()), "--build-arg", f"BASE={base}",
               "--build-arg", f"EXTRA_CA_CERTS={extra_ca_certs()}", "-t", tag, str(ROOT),
               timeout=1800)
    # the images a rebuild replaced are dangling now: not kept (the project's alone, by the
    # label its Containerfile gives both stages)
    podman("image", "prune", "-f", "--filter", "label=org.opencontainers.image.title=kafka-audit",
           timeout=300)
    return IMAGE


def image_size(image: str) -> int:
    """Bytes, as ``podman images`` reports them (every layer, the base's included)."""
    return int(json.loads(podman("image", "inspect", image).stdout)[0]["Size"])


def run_flags(*mounts: tuple[Path | str, str, str]) -> list[str]:
    """``podman run``'s flags for a container beside the local test cluster: host network
    (the cluster and the API on loopback), the limits, ``(source, target, mode)`` mounts."""
    flags = [*limits(), "--network", "host"]
    for source, target, mode in mounts:
        flags += ["-v", f"{source}:{target}:{mode}"]
    return flags


def need_tools() -> None:
    missing = [t for t in ("podman", "runc", "debootstrap") if shutil.which(t) is None]
    assert not missing, f"bash dev.sh setup installs these: {missing}"
