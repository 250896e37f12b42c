#!/usr/bin/env bash
# Installs what Arbiter needs on a fresh Debian 12 machine: the system compilers (gcc for the
# x86 lane; clang-19, lld-19 and libamdhip64-dev for the gfx1151 compile checks), PostgreSQL
# (many workers; the tests start their own server), chromium and chromedriver (the tests drive
# the live report page), wrk (bench/serve_load.py), then the package itself with its test and
# dev (ruff, mypy) extras. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v gcc >/dev/null || need+=(gcc)
command -v clang++-19 >/dev/null || need+=(clang-19)
command -v ld.lld-19 >/dev/null || need+=(lld-19)
[ -e /usr/include/hip/hip_runtime.h ] || need+=(libamdhip64-dev)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
  "${SUDO[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q "${need[@]}"
fi
python3 -m pip install -q -e ".[test,dev,aot]"
