#!/usr/bin/env bash
# setup.sh: the virtual environment of ml.py, CACHE/venvs/ml, with PyTorch and JAX for CPU
# from the Python registry (torch==2.15.0, jax[cpu]==0.10.2). CACHE is
# ${KAURI_CACHE:-$HOME/.cache/kauri}.
#
# The registry's torch wheel brings the CUDA libraries along (about 3 GB of wheels, 6 GB
# installed; no CPU-only torch is on the registry). So the wheels are downloaded once into
# CACHE/wheels (about 2 minutes) and installed from there only (about 2.5 minutes on 2 cores),
# and the venv is kept: a second run downloads and installs nothing when the venv has the
# pinned versions. Uses Debian's /usr/bin/python3 (python3-venv), or $KAURI_PYTHON.
set -euo pipefail

CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
PY=${KAURI_PYTHON:-/usr/bin/python3}
WHEELS=$CACHE/wheels
TORCH=2.15.0
JAX=0.10.2
dir=$CACHE/venvs/ml
log() { echo "ml setup: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [ -x "$dir/bin/python3" ] &&
  [ "$("$dir/bin/python3" -c "import importlib.metadata as m; print(m.version('torch'), m.version('jax'), m.version('jaxlib'))" 2>/dev/null)" = "$TORCH $JAX $JAX" ]; then
  log "ok (torch $TORCH, jax $JAX in $dir)"
  exit 0
fi
mkdir -p "$WHEELS" "$CACHE/venvs"
reqs=("torch==$TORCH" "jax[cpu]==$JAX")
pip_() { "$PY" -m pip --disable-pip-version-check "$@"; }
# Only what CACHE/wheels lacks is downloaded.
if ! pip_ download -q --only-binary=:all: --no-index --find-links "$WHEELS" -d "$WHEELS" "${reqs[@]}" >/dev/null 2>&1; then
  log "downloading ${reqs[*]} (about 3 GB, once)"
  pip_ download -q --only-binary=:all: -d "$WHEELS" "${reqs[@]}" || die "pip download ${reqs[*]} failed"
fi
log "making $dir (${reqs[*]})"
rm -rf "$dir"
"$PY" -m venv "$dir"
"$dir/bin/python3" -m pip install -q --disable-pip-version-check --no-index --find-links "$WHEELS" "${reqs[@]}" ||
  die "pip install ${reqs[*]} into $dir failed"
log "ok (torch $TORCH, jax $JAX in $dir)"
