#!/usr/bin/env bash
# Build KenLM's `lmplz` and `build_binary` from the PyPI sdist (the same source as the `kenlm`
# Python module) into a per-machine cache shared by every clone:
#   $KENLM_PREFIX/bin/{lmplz,build_binary}
# Environment (the Makefile sets all of them):
#   KENLM_VERSION     sdist version (default 0.3.0)
#   KENLM_MAX_ORDER   -DKENLM_MAX_ORDER; must equal the Python module's MAX_ORDER (setup.py
#                     default 6), else binaries from build_binary and `kenlm.Model` disagree
#   KENLM_PREFIX      install prefix (default <cache>/kenlm-VERSION-orderN)
#   KENLM_PIP_PYTHON  a Python with pip, used for `pip download` (default python3)
#   KENLM_JOBS        parallel compile jobs (default 2)
# Idempotent: returns at once when both binaries exist. Concurrent runs serialise on a lock and the
# binaries appear in bin/ by an atomic rename, so no clone ever sees a half-built tool.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

version="${KENLM_VERSION:-0.3.0}"
max_order="${KENLM_MAX_ORDER:-6}"
cache="$(dpngram_cache_dir)"
prefix="${KENLM_PREFIX:-$cache/kenlm-$version-order$max_order}"
pip_python="${KENLM_PIP_PYTHON:-python3}"
jobs="${KENLM_JOBS:-2}"
tools=(lmplz build_binary)

have_tools() {
    local t
    for t in "${tools[@]}"; do [ -x "$prefix/bin/$t" ] || return 1; done
}

have_tools && exit 0

mkdir -p "$cache" "$prefix"
exec 9>"$cache/.kenlm-build.lock"
flock 9
have_tools && exit 0   # another clone finished it while we waited

work="$(mktemp -d "$cache/kenlm-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

sdist="$(ensure_kenlm_sdist "$version" "$pip_python")"

log "building KenLM $version lmplz + build_binary (KENLM_MAX_ORDER=$max_order, -j$jobs); takes a few minutes once"
tar -xzf "$sdist" -C "$work"
src="$work/kenlm-$version"
cmake -S "$src" -B "$work/build" \
    -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER="$max_order" -DCOMPILE_TESTS=OFF \
    >"$work/cmake.log" 2>&1 \
    || { tail -n 30 "$work/cmake.log" >&2; die "cmake configure of KenLM failed (missing Boost/zlib dev packages? run scripts/system_deps.sh)"; }
make -C "$work/build" -j"$jobs" "${tools[@]}" >"$work/make.log" 2>&1 \
    || { tail -n 40 "$work/make.log" >&2; die "compiling KenLM failed"; }

for t in "${tools[@]}"; do
    [ -x "$work/build/bin/$t" ] || die "KenLM build finished without bin/$t"
    if ldd "$work/build/bin/$t" | grep -q 'not found'; then
        die "bin/$t has unresolved shared libraries: $(ldd "$work/build/bin/$t" | grep 'not found' | tr -s ' \t' ' ')"
    fi
done

# Publish: stage next to the final dir, then rename (atomic on one filesystem).
staged="$prefix/bin.new.$$"
rm -rf "$staged"
mkdir -p "$staged"
cp "${tools[@]/#/$work/build/bin/}" "$staged/"
{
    echo "kenlm_version=$version"
    echo "kenlm_max_order=$max_order"
    echo "sdist_sha256=$(sha256sum "$sdist" | cut -d' ' -f1)"
    echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "compiler=$(c++ --version | head -n 1)"
} >"$staged/BUILD_INFO"
rm -rf "${prefix:?}/bin"
mv "$staged" "$prefix/bin"
log "KenLM tools ready in $prefix/bin"
