#!/usr/bin/env bash
# REV's tree in DIR, laid out as installed (lanes/ and db/ at arbiter/lanes and arbiter/db, so
# that `PYTHONPATH=DIR` loads REV's lanes, not this checkout's), byte-compiled:
#   bash bench/old_tree.sh REV DIR
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
git archive "$rev" arbiter bench examples | tar -x -C "$dir"
git archive --prefix=arbiter/lanes/ "$rev:lanes" | tar -x -C "$dir"
git archive --prefix=arbiter/db/ "$rev:db" | tar -x -C "$dir"
ln -s arbiter/lanes "$dir/lanes"  # (for its bench, which byte-compiles lanes/)
python3 -m compileall -q "$dir" >/dev/null 2>&1 || true
