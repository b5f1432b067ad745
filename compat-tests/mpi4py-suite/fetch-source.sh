#!/usr/bin/env bash
# fetch-source.sh: fetches the source package of the installed python3-mpi4py, for its test
# suite (test/runtests.py), into CACHE/mpi4py-src/mpi4py-VERSION (CACHE is
# ${KAURI_CACHE:-$HOME/.cache/kauri}). Only the tests are used: they run against the
# installed mpi4py (see README.md next to this file).
#
# `apt-get source mpi4py=DEBIAN_VERSION` (deb-src entries: .ci/setup enables them for
# MPICH's source package). A mirror that serves the index but not the source tarballs (seen:
# 404 on mpi4py_3.1.4.orig.tar.gz) is worked around with the same upstream version's sdist
# from PyPI (`pip download mpi4py==VERSION`): the same tests, without Debian's patches.
# Idempotent: a no-op once CACHE/mpi4py-src/mpi4py-VERSION/test/runtests.py exists.
set -euo pipefail

CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
log() { echo "mpi4py fetch-source: $*" >&2; }
die() { log "error: $*"; exit 1; }

upstream=$(dpkg-query -W -f='${source:Upstream-Version}' python3-mpi4py 2>/dev/null) ||
  die "python3-mpi4py is not installed (apt-get install python3-mpi4py)"
debian=$(dpkg-query -W -f='${source:Version}' python3-mpi4py)
dest=$CACHE/mpi4py-src
src=$dest/mpi4py-$upstream
if [ -f "$src/test/runtests.py" ]; then
  exit 0
fi
mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if (cd "$tmp" && apt-get source -qq "mpi4py=$debian" >"$tmp/apt.log" 2>&1) &&
  [ -f "$tmp/mpi4py-$upstream/test/runtests.py" ]; then
  log "mpi4py $debian from apt-get source"
else
  log "apt-get source mpi4py=$debian failed ($(grep -m1 -E '^E:' "$tmp/apt.log" || echo '?')); trying PyPI's mpi4py==$upstream"
  py=$(command -v python3)
  "$py" -m pip download -q --no-deps --no-binary :all: "mpi4py==$upstream" -d "$tmp" >"$tmp/pip.log" 2>&1 ||
    die "pip download mpi4py==$upstream failed: $(tail -3 "$tmp/pip.log")"
  tar -xzf "$tmp/mpi4py-$upstream.tar.gz" -C "$tmp"
  [ -f "$tmp/mpi4py-$upstream/test/runtests.py" ] || die "no test/runtests.py in mpi4py-$upstream.tar.gz"
  log "mpi4py $upstream from PyPI"
fi
rm -rf "$src"
mv "$tmp/mpi4py-$upstream" "$src"
