#!/usr/bin/env bash
# Create (or update) the project venv and install dpngram with its dev extras, pinned by the
# constraints file. Usage: make_venv.sh VENV_DIR CONSTRAINTS_FILE
#   DPNGRAM_INSTALLER=uv (default) bootstraps uv into the venv with pip, then installs with uv;
#   DPNGRAM_INSTALLER=pip uses pip alone (slower, same result).
# The kenlm Python module is compiled from its sdist here; MAX_ORDER is exported so it matches the
# lmplz/build_binary build (scripts/build_kenlm.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

venv="${1:?usage: make_venv.sh VENV_DIR CONSTRAINTS_FILE}"
constraints="${2:?usage: make_venv.sh VENV_DIR CONSTRAINTS_FILE}"
installer="${DPNGRAM_INSTALLER:-uv}"
kenlm_version="${KENLM_VERSION:-0.3.0}"
export MAX_ORDER="${KENLM_MAX_ORDER:-6}"
[ -f "$constraints" ] || die "constraints file $constraints not found"
[ -f pyproject.toml ] || die "run from the repository root (no pyproject.toml in $(pwd))"

python="$(bash "$here/find_python.sh")"

# What the chosen interpreter lacks on a bare Debian: ensurepip (python3.11-venv) and the C
# headers the kenlm module compiles against (python3.11-dev).
extra_pkgs=()
if ! "$python" -c 'import ensurepip' >/dev/null 2>&1; then
    extra_pkgs+=(python3.11-venv)
fi
if ! "$python" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    extra_pkgs+=(python3.11-dev)
fi
if [ "${#extra_pkgs[@]}" -gt 0 ] && ! dpkg -S "$python" >/dev/null 2>&1; then
    die "$python lacks ${extra_pkgs[*]} (no ensurepip or no Python.h) and is not a Debian package: reinstall it with venv support and headers, or set PYTHON=/usr/bin/python3.11"
fi
bash "$here/system_deps.sh" "${extra_pkgs[@]}"

if [ -x "$venv/bin/python" ]; then
    venv_version="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo broken)"
    if [ "$venv_version" != "3.11" ]; then
        log "$venv has Python $venv_version, not 3.11: recreating it"
        rm -rf "$venv"
    fi
fi
if [ ! -x "$venv/bin/python" ]; then
    log "creating $venv with $python"
    "$python" -m venv "$venv" || die "'$python -m venv $venv' failed"
fi
vpy="$venv/bin/python"

install_args=(-e ".[${DPNGRAM_EXTRAS:-dev,spark,bench,postgres,s3,celery}]" -c "$constraints")
case "$installer" in
uv)
    if ! "$venv/bin/uv" --version >/dev/null 2>&1; then
        log "bootstrapping uv into $venv"
        "$vpy" -m pip install --quiet --disable-pip-version-check -c "$constraints" uv \
            || die "could not install uv into $venv with pip (retry with DPNGRAM_INSTALLER=pip)"
    fi
    # The kenlm module has no wheel on PyPI and uv's cache does not reliably keep the one it builds
    # (~80 s per fresh clone): build it once per machine from the cached sdist, with MAX_ORDER set,
    # into a wheel directory that every clone's install finds first.
    wheel_dir="$(dpngram_cache_dir)/wheels/kenlm-$kenlm_version-order$MAX_ORDER"
    if ! compgen -G "$wheel_dir/kenlm-$kenlm_version-cp311-*.whl" >/dev/null; then
        sdist="$(ensure_kenlm_sdist "$kenlm_version" "$vpy")"
        log "building the kenlm $kenlm_version Python wheel (MAX_ORDER=$MAX_ORDER); once per machine"
        mkdir -p "$wheel_dir"
        wheel_tmp="$(mktemp -d "$wheel_dir.XXXXXX")"
        "$venv/bin/uv" build --quiet --python "$vpy" --wheel --out-dir "$wheel_tmp" "$sdist" \
            || { rm -rf "$wheel_tmp"; die "building the kenlm wheel from $sdist failed (see above)"; }
        mv "$wheel_tmp"/kenlm-*.whl "$wheel_dir"/
        rm -rf "$wheel_tmp"
    fi
    uv_args=(--find-links "$wheel_dir")
    # uv ignores pip.conf: reuse a local wheel directory only when this machine has one.
    if [ -d /opt/wheels ]; then
        uv_args+=(--find-links /opt/wheels)
    fi
    log "installing dpngram[dev] with uv (-c $constraints)"
    # --compile-bytecode: uv writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set
    # (this CI, most container images) nothing ever caches them, so every dpngram process (each
    # CLI run, each Airflow task) recompiled its imports: ~7 s of a run (docs/engines.md, "Scale").
    "$venv/bin/uv" pip install --python "$vpy" --compile-bytecode "${uv_args[@]}" "${install_args[@]}" \
        || die "uv pip install -e '.[dev]' -c $constraints failed (see above)"
    ;;
pip)
    log "installing dpngram[dev] with pip (-c $constraints)"
    "$vpy" -m pip install --disable-pip-version-check "${install_args[@]}" \
        || die "pip install -e '.[dev]' -c $constraints failed (see above)"
    ;;
*)
    die "DPNGRAM_INSTALLER must be uv or pip (got $installer)"
    ;;
esac

# The editable install's own modules too (uv and pip compile site-packages only); stale ones are
# recompiled in memory after an edit, so this only saves time.
"$vpy" -m compileall -q -j 0 src >/dev/null || die "'python -m compileall src' failed"
"$vpy" -c 'import kenlm, duckdb, dpngram' || die "the venv installed but 'import kenlm, duckdb, dpngram' fails"
touch "$venv/.installed"
