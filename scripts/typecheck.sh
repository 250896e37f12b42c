#!/usr/bin/env bash
# mypy on the package as it installs: lanes/ and db/ become arbiter.lanes and arbiter.db
# (package-dir in pyproject.toml), a mapping mypy cannot read. A tree of symlinks in build/
# gives it that layout, so every module is checked under its installed name and imports of
# arbiter.lanes.* / arbiter.db resolve. Error paths are mapped back to the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tree=$root/build/typecheck
rm -rf "$tree"
mkdir -p "$tree/arbiter"
for f in arbiter/*; do
  [ "${f##*/}" = __pycache__ ] || ln -s "$root/$f" "$tree/arbiter/"
done
ln -s "$root/lanes" "$tree/arbiter/lanes"
ln -s "$root/db" "$tree/arbiter/db"
cd "$tree"
python3 -m mypy --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" \
  -p arbiter "$@" | sed -e 's#^arbiter/lanes/#lanes/#' -e 's#^arbiter/db/#db/#'
