#!/usr/bin/env bash
# Installs maturin, pinned below, for build.sh: its wheel is downloaded from the Python
# registry once into ${KAURI_CACHE:-~/.cache/kauri}/wheels (beside the MPI wheels of
# compat-tests/wheels/setup.sh) and installed from there into a venv of its own,
# ${KAURI_CACHE:-~/.cache/kauri}/maturin-VERSION, made with Debian's python3 (python3-venv) or
# $KAURI_PYTHON. A no-op when that venv has that maturin. .ci/setup runs it.
set -euo pipefail
CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
PY=${KAURI_PYTHON:-/usr/bin/python3}
MATURIN_VERSION=1.16.0
say() { echo "wheel setup: $*" >&2; }
die() { say "error: $*"; exit 1; }

tools="$CACHE/maturin-$MATURIN_VERSION"
if [ -x "$tools/bin/maturin" ] && [ "$("$tools/bin/maturin" --version 2>/dev/null)" = "maturin $MATURIN_VERSION" ]; then
  exit 0
fi
mkdir -p "$CACHE/wheels"
pip_() { "$PY" -m pip --disable-pip-version-check "$@"; }
# Only what CACHE/wheels lacks is downloaded.
if ! pip_ download -q --only-binary=:all: --no-index --find-links "$CACHE/wheels" \
  -d "$CACHE/wheels" "maturin==$MATURIN_VERSION" >/dev/null 2>&1; then
  say "downloading maturin $MATURIN_VERSION"
  pip_ download -q --only-binary=:all: -d "$CACHE/wheels" "maturin==$MATURIN_VERSION" ||
    die "pip download maturin==$MATURIN_VERSION failed"
fi
say "installing maturin $MATURIN_VERSION into $tools"
rm -rf "$tools"
"$PY" -m venv "$tools" || die "$PY -m venv failed (Debian: apt-get install python3-venv)"
"$tools/bin/python3" -m pip install -q --disable-pip-version-check --no-index \
  --find-links "$CACHE/wheels" "maturin==$MATURIN_VERSION" || die "pip install maturin failed"
"$tools/bin/maturin" --version >/dev/null || die "$tools/bin/maturin does not run"
