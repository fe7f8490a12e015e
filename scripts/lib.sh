# shellcheck shell=bash
# Shared helpers for the set-up scripts (sourced, not run). Bash only.
# Messages go to stderr, prefixed so they stand out in `make` output.

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

# Run a command as root: directly when we are root, through non-interactive sudo otherwise.
# Fails with a clear message when neither is possible (CI has no stdin, so sudo must not prompt).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        die "need root to run '$*': run as root, or configure password-less sudo, or run it yourself and retry"
    fi
}

# Where cached build products live: outside the repository so fresh clones on one machine reuse them.
dpngram_cache_dir() { printf '%s/dpngram\n' "${XDG_CACHE_HOME:-$HOME/.cache}"; }

# sha256 of the kenlm sdists on PyPI we build from; another version is checked by pip's index hash only.
declare -A KENLM_SDIST_SHA256=([0.3.0]=c4628bb9fb63c8a6f9240035b8b037385cfc404cb72e933cf48878291edac1e8)

_kenlm_sdist_ok() {  # FILE VERSION
    local want="${KENLM_SDIST_SHA256[$2]:-}"
    [ -f "$1" ] || return 1
    [ -z "$want" ] && return 0
    [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$want" ]
}

# Make sure the kenlm VERSION sdist is in the cache (downloaded once with PIP_PYTHON's pip,
# sha256-checked) and print its path. Safe to call from concurrent set-ups.
ensure_kenlm_sdist() {  # VERSION PIP_PYTHON
    local version="$1" pip_python="$2" cache sdist dl
    cache="$(dpngram_cache_dir)"
    sdist="$cache/src/kenlm-$version.tar.gz"
    mkdir -p "$cache/src"
    (
        flock 8
        _kenlm_sdist_ok "$sdist" "$version" && exit 0
        dl="$(mktemp -d "$cache/src/dl.XXXXXX")"
        trap 'rm -rf "$dl"' EXIT
        log "downloading the kenlm==$version sdist"
        # --no-binary for kenlm only: ':all:' would also force building setuptools/cmake from source.
        "$pip_python" -m pip download --quiet --disable-pip-version-check --no-deps \
            --no-binary kenlm "kenlm==$version" -d "$dl" >&2 \
            || die "could not download the kenlm==$version sdist from the package index"
        _kenlm_sdist_ok "$dl/kenlm-$version.tar.gz" "$version" \
            || die "kenlm-$version.tar.gz does not match its pinned sha256"
        mv "$dl/kenlm-$version.tar.gz" "$sdist"
    ) 8>"$cache/src/.lock" || exit 1
    printf '%s\n' "$sdist"
}
