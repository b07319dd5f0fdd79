"""What each install costs: the wheel with one extra, from the package index, into a fresh
virtual environment: wall time, packages installed and the size of site-packages.

Needs the package index (PyPI or the site's mirror); pip's cache is off, so each install
downloads what it installs, as on a new host.

    .venv/bin/python bench/install_sizes.py [--extras producer api spark all]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def one(wheel: Path, extra: str | None, base: Path) -> dict:
    venv = base / f"venv-{extra or 'plain'}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    before = {p.name for p in site.glob("*.dist-info")}
    target = f"{wheel}[{extra}]" if extra else str(wheel)
    t = time.monotonic()
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-cache-dir", target],
                   check=True, timeout=1800)
    took = time.monotonic() - t
    added = {p.name for p in site.glob("*.dist-info")} - before
    return {"extra": extra or "(plain)", "seconds": took, "packages": len(added),
            "mb": _size(site) / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extras", nargs="+", default=["plain", "producer", "api", "spark", "all"])
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="install-sizes-"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q",
                    "-w", str(base / "dist")], check=True, timeout=600)
    wheel = next((base / "dist").glob("kafka_audit-*.whl"))
    rows = [one(wheel, None if e == "plain" else e, base) for e in args.extras]
    print("| install | packages | site-packages | time |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| `{r['extra']}` | {r['packages']} | {r['mb']:,.0f} MB | {r['seconds']:.0f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
