#!/usr/bin/env bash
# Make sure the Debian packages needed to build KenLM (lmplz, build_binary and the Python module)
# are installed. Usage: system_deps.sh [EXTRA_PACKAGE ...]
# Checks with dpkg-query first (fast, no root needed); only when something is missing does it run
# `apt-get update` once and `apt-get install`, as root or through password-less sudo.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

packages=(
    build-essential cmake
    libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev
    zlib1g-dev libbz2-dev liblzma-dev
    # a headless browser for the tests that look at the Airflow trigger form and the offline
    # Data Docs (driven by the playwright Python package with executable_path=/usr/bin/chromium)
    chromium
    # Debian's PostgreSQL server (initdb, pg_ctl; also creates the 'postgres' system user the
    # server runs as when the tests run as root) for tests/test_platform.py, the ledger tests and
    # the Airflow overhead benchmark: the metadata DB and the ledger of docker/compose.yaml
    postgresql
    # Debian's Redis server: the Celery broker of tests/test_platform.py (`make test-platform`),
    # which starts a throw-away redis-server of its own; no system service is left running (below)
    redis-server
    "$@"
)
# A Java runtime for the Spark engine (PySpark local mode); any installed JDK/JRE will do.
if ! command -v java >/dev/null 2>&1; then
    packages+=(default-jre-headless)
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    # Not Debian-like: we cannot check or install; go on if the compilers are there, and let cmake
    # report a missing library precisely.
    if command -v cmake >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1; then
        log "no dpkg/apt-get here: assuming the equivalents of ${packages[*]} are installed"
        exit 0
    fi
    die "no dpkg/apt-get and no cmake/g++: install the equivalents of: ${packages[*]}"
fi

missing=()
for pkg in "${packages[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
    if [ "$status" != "installed" ]; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

log "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
as_root apt-get update -q \
    || die "apt-get update failed; install these packages yourself and retry: ${missing[*]}"
as_root apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || die "apt-get install failed; install these packages yourself and retry: ${missing[*]}"
# Debian's redis-server package starts (and, with systemd, enables) a system service when it is
# installed. The tests start a throw-away redis-server of their own on a free port and want no
# system broker on 6379: stop it, and keep it from coming back at boot.
if [[ " ${missing[*]} " == *" redis-server "* ]]; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        as_root systemctl disable --now redis-server.service >/dev/null 2>&1 || true
    elif [ -x /etc/init.d/redis-server ]; then
        as_root /etc/init.d/redis-server stop >/dev/null 2>&1 || true
    fi
fi
