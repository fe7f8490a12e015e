#!/usr/bin/env bash
# Print the path of a Python 3.11 interpreter to build the venv with.
# Order: $PYTHON (if set), python3.11, python3. Exits non-zero with a one-line reason otherwise.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

want="3.11"
candidates=()
if [ -n "${PYTHON:-}" ]; then
    candidates+=("$PYTHON")
fi
candidates+=(python3.11 python3)

seen=""
for cand in "${candidates[@]}"; do
    path="$(command -v "$cand" 2>/dev/null)" || continue
    version="$("$path" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || continue
    if [ "$version" = "$want" ]; then
        # Resolve pyenv-style shims to the real interpreter so the venv does not depend on the shim.
        real="$("$path" -c 'import sys; print(sys.executable)')"
        printf '%s\n' "$real"
        exit 0
    fi
    seen="$seen $cand=$version"
done
die "dpngram needs Python $want; found:${seen:- no python3 on PATH}. Install python$want (Debian: apt-get install python3.11 python3.11-venv python3.11-dev) or set PYTHON=/path/to/python$want"
