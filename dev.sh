#!/usr/bin/env bash
# The README's two commands:
#   bash dev.sh demo   set up what is missing, run the demo (acks=1 leader kill, audit, REST)
#   bash dev.sh test   set up what is missing, run every test (unit + real-cluster integration)
# Other verbs: setup (install only, from requirements.lock), lint (ruff and the import
# contracts: CI runs it before the tests), lock (requirements.lock from pyproject.toml's
# ranges), bench (producer), bench-audit (consume + audit).
set -euo pipefail
cd "$(dirname "$0")"
# the checkout keeps its working data (tables, checkpoints, the demo cluster) in var/;
# an installed kafka-audit uses ~/.local/share/kafka-audit unless KAFKA_AUDIT_HOME says
export KAFKA_AUDIT_HOME="${KAFKA_AUDIT_HOME:-$PWD/var}"

log() { printf '[dev.sh] %s\n' "$*"; }

need_debian() {  # need_debian COMMAND-OR-FILE PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  case "$1" in /*) [ -e "$1" ] && return 0 ;; esac
  log "installing $2 (for $1)"
  if [ "$(id -u)" != 0 ]; then log "$1 is missing and this is not root: install $2"; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

setup() {
  need_debian java openjdk-17-jre-headless
  need_debian javac openjdk-17-jdk-headless  # compiles the project's one Java class
  need_debian mvn maven
  need_debian iptables iptables  # network faults on loopback in the fault tests
  need_debian gcc gcc  # builds the producers' librdkafka plugin (producers/plugin/)
  need_debian /usr/include/librdkafka/rdkafka.h librdkafka-dev  # the plugin's headers
  need_debian /usr/include/openssl/evp.h libssl-dev  # the plugin's stamp MAC (libcrypto)
  need_debian kcat kcat  # a producer in another language, audited through the plugin (tests)
  need_debian chromium chromium  # headless: the dashboard test opens the page, keeps a screenshot
  need_debian node nodejs  # runs the dashboard's script over hostile records (unit tests)
  # the container test builds deploy/Containerfile on a Debian base made from Debian's
  # packages (no image registry reachable) and runs it beside the test cluster
  need_debian podman podman
  need_debian runc runc  # podman's runtime here: crun fails on this machine's cgroups
  need_debian debootstrap debootstrap
  need_debian ss iproute2  # the RabbitMQ test reads the nodes' links with ss
  # the Go producer's test (tests/cluster/test_plugin_go.py) links confluent-kafka-go
  # against a shared librdkafka through pkg-config; Go >= 1.22 comes with the machine
  need_debian pkg-config pkgconf
  if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
    log "Go (>= 1.22) is missing: the Go producer's test needs it (https://go.dev/dl)"
  fi
  # the local RabbitMQ cluster (scenarios/rabbit_cluster.py) runs nodes of its own: the
  # package's system service is not started (a policy-rc.d refuses it while it installs)
  if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    local policy=/usr/sbin/policy-rc.d added=
    if [ "$(id -u)" = 0 ] && [ ! -e "$policy" ]; then
      trap "rm -f '$policy'" EXIT  # removed even if the install fails
      printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && added=1
    fi
    need_debian /usr/lib/rabbitmq/bin/rabbitmq-server rabbitmq-server
    if [ -n "$added" ]; then rm -f "$policy"; trap - EXIT; fi
  fi
  local py=python3.11
  command -v "$py" >/dev/null 2>&1 || py=python3
  if [ ! -x .venv/bin/python ]; then
    log "creating .venv with $($py --version)"
    "$py" -m venv .venv
  fi
  local stamp=.venv/.kafka-audit-installed want
  want=$(cat pyproject.toml requirements.lock | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing the Python dependencies of requirements.lock (first time: a few minutes)"
    .venv/bin/pip install -q --upgrade pip
    # the exact set the tests ran on, each file checked against its hash; then the project
    # itself, editable, with no resolution of its own (its ranges admit what the lock has)
    .venv/bin/pip install -q --require-hashes -r requirements.lock
    .venv/bin/pip install -q --no-deps -e .
    .venv/bin/pip check
    echo "$want" > "$stamp"
  fi
  log "fetching pinned JVM jars with Maven into the per-user cache (skipped when cached)"
  .venv/bin/kafka-audit setup
  # the tests' S3-compatible server (scenarios/object_store.py): not a deployment's
  .venv/bin/python -c 'from kafka_audit.jars import ensure_jars; ensure_jars(("s3proxy",))'
}

lock() {  # requirements.lock from pyproject.toml's ranges; pins already in it are kept
  # (uv's default), `lock --upgrade`: the newest releases the ranges admit, to be tested;
  # then requirements-runtime.lock, the container image's: [all] alone, at the same pins
  local py
  py=$(.venv/bin/python -c 'import platform; print(platform.python_version())')
  .venv/bin/uv pip compile pyproject.toml --extra all --extra test --extra docs \
    --python-version "$py" --python-platform x86_64-manylinux_2_28 --generate-hashes \
    --custom-compile-command "bash dev.sh lock" -o requirements.lock "$@"
  .venv/bin/uv pip compile pyproject.toml --extra all -c requirements.lock -q \
    --python-version "$py" --python-platform x86_64-manylinux_2_28 --generate-hashes \
    --custom-compile-command "bash dev.sh lock" -o requirements-runtime.lock
}

lint() {  # ruff, then the import contracts of [tool.importlinter] in pyproject.toml
  .venv/bin/ruff check .
  # import-linter reads the package from one folder, but kafka_audit's parts live in the
  # folders [tool.setuptools] package-dir names: link them into one tree as a wheel has them
  local tree here=$PWD
  tree=$(mktemp -d)
  trap "rm -rf '$tree'" EXIT
  .venv/bin/python - "$tree" <<'PY'
import sys, tomllib
from pathlib import Path
tree, here = Path(sys.argv[1]), Path.cwd()
dirs = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
for name, folder in sorted(dirs.items()):  # a package before its subpackages
    parent, _, leaf = name.rpartition(".")
    if not parent:  # the root package: a folder of links to its own folder's entries
        (tree / name).mkdir()
        for entry in (here / folder).iterdir():
            (tree / name / entry.name).symlink_to(entry)
    elif f"{dirs[parent]}/{leaf}" != folder:  # not inside its parent's folder: a link
        if "." in parent:  # it would land inside a linked folder of the checkout
            sys.exit(f"dev.sh lint: cannot place {name} ({folder}) in the package tree")
        (tree / name.replace(".", "/")).symlink_to(here / folder)
PY
  # run from the tree: lint-imports puts its working folder first on the import path
  (cd "$tree" && "$here/.venv/bin/lint-imports" --config "$here/pyproject.toml" --no-cache)
}

test_all() {  # every tier, in two lanes: the session's cluster and the scenario tiers in
  # one; the unit tier, the Spark tier, then the cluster tier's tests with clusters of
  # their own (marked own_cluster: RabbitMQ, the other Kafka versions, ZooKeeper) and the
  # scenario catalog, the unclean election and the paused leader (marked second_lane, on a
  # session's cluster of this lane) in the other
  # The unit tier (pure logic, delta-rs, the API in process: no JVM, no broker), the Spark
  # tier (Spark, Delta and the S3 server, no broker) and the own_cluster tests (their
  # clusters and S3 server moved off the other lane's ports by AUDIT_TEST_PORT_OFFSET) take
  # the CPU the session's cluster lane leaves while it waits on brokers, fault windows and
  # restarts; their output follows. In one lane the four tiers took CI past its 45 minutes
  # on slow days, and in two with every cluster test in the first (docs/benchmarks.md).
  # Not niced: each side's timed waits have held on days this machine ran 1.6x slower; a
  # starved side would not. An interrupt or TERM stops both and still prints the second
  # lane's output.
  local side_log side_pid rest_pid rc=0 side_rc=0
  side_log=$(mktemp)
  (
    urc=0 src=0 orc=0
    .venv/bin/python -m pytest -q -p no:cacheprovider --durations=20 tests/unit || urc=$?
    echo "---- the Spark tier (tests/spark), after the unit tier in this lane ----"
    AUDIT_TEST_PORT_OFFSET=1000 .venv/bin/python -m pytest -q -p no:cacheprovider \
      --durations=20 tests/spark || src=$?
    echo "---- the own_cluster and second_lane tests, after the Spark tier in this lane ----"
    AUDIT_TEST_PORT_OFFSET=1000 .venv/bin/python -m pytest -q -p no:cacheprovider \
      --durations=20 -m "own_cluster or second_lane" tests/cluster tests/scenarios || orc=$?
    echo "---- the unit tier exit $urc, the Spark tier exit $src, own_cluster and" \
      "second_lane exit $orc ----"
    [ "$urc" = 0 ] && [ "$src" = 0 ] && [ "$orc" = 0 ]
  ) > "$side_log" 2>&1 &
  side_pid=$!
  .venv/bin/python -m pytest -q -p no:cacheprovider --durations=40 \
    -m "not own_cluster and not second_lane" tests/cluster tests/scenarios &
  rest_pid=$!
  # the second lane is a subshell: stopped before its running pytest (named first), so that
  # it does not go on to its next tier
  trap 'kill "$side_pid" $(pgrep -P "$side_pid") "$rest_pid" 2>/dev/null' INT TERM HUP
  wait "$rest_pid" || rc=$?
  wait "$side_pid" || side_rc=$?
  trap - INT TERM HUP
  echo "---- the unit, Spark, own_cluster and second_lane tests, run beside: exit $side_rc ----"
  cat "$side_log"
  rm -f "$side_log"
  if [ "$rc" != 0 ]; then return "$rc"; fi
  return "$side_rc"
}

case "${1:-}" in
  setup) setup ;;
  demo) setup; shift; exec .venv/bin/kafka-audit demo "$@" ;;
  test) setup; shift
    if [ $# -eq 0 ]; then test_all
    else exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=40 "$@"; fi ;;
  lint) setup; lint ;;
  lock) setup; shift; lock "$@" ;;
  bench) setup; shift; exec .venv/bin/python bench/producer_bench.py "$@" ;;
  bench-audit) setup; shift; exec .venv/bin/python bench/audit_bench.py "$@" ;;
  *) echo "usage: bash dev.sh demo|test|setup|lint|lock|bench|bench-audit" >&2; exit 2 ;;
esac
