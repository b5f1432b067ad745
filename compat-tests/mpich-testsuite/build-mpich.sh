#!/usr/bin/env bash
# build-mpich.sh: fetch the MPICH 4.0.2 source package and build the two ch3 MPICHs that
# MPICH's own test suite is run against (see compat-tests/mpich-testsuite/README.md).
#
#   compat-tests/mpich-testsuite/build-mpich.sh            # fetch (once) and build both
#   compat-tests/mpich-testsuite/build-mpich.sh --fetch-only
#
# Results, under CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}:
#   CACHE/mpich-src/mpich-4.0.2/       the Debian source package, patches applied (apt-get source)
#   CACHE/mpich-4.0.2-ch3-pmi1/        --with-device=ch3:nemesis --with-pm=none --with-pmi=simple
#   CACHE/mpich-4.0.2-ch3-pmi2/        the same with --with-pmi=pmi2/simple
#   (each with bin/mpicc, lib/libmpi.so; build trees in CACHE/build/, logs in CACHE/logs/)
#
# Idempotent: a prefix holding a stamp file (.kauri-build) whose recorded configure line equals
# the current one is left alone; anything else there is removed and rebuilt. Concurrent runs
# wait for each other (flock on CACHE/.build-mpich.lock). With 2 or more CPUs the two builds
# run side by side, each with make -j(JOBS/2): about 8 minutes for both on 2 cores (one after
# the other: 6 to 7 minutes each, configure being serial). Fortran, C++, docs and ROMIO are
# left out (the test suite is configured without them); hwloc is the system one (libhwloc-dev).
#
# Fetching needs deb-src entries: when `apt-get source` finds none, this script adds
# `deb-src` to the `Types:` of /etc/apt/sources.list.d/debian.sources (root or sudo) and runs
# `apt-get update`. Needs dpkg-dev (dpkg-source), gcc, make, perl, python3.
#
# Environment: KAURI_CACHE, JOBS (make -j, default: number of CPUs).
set -euo pipefail

VERSION=4.0.2
CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
JOBS=${JOBS:-$(nproc)}
SRC_PARENT=$CACHE/mpich-src
SRC=$SRC_PARENT/mpich-$VERSION
STAMP=.kauri-build

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

log() { echo "build-mpich: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The configure options shared by both builds; the PMI flavour is added per build.
common_options=(
  --with-device=ch3:nemesis --with-pm=none
  --disable-fortran --disable-cxx --disable-doc --disable-romio
  --enable-fast=O2 --enable-g=none
  --disable-static --enable-shared
  --with-hwloc=/usr
)

enable_deb_src() {
  local f=/etc/apt/sources.list.d/debian.sources
  if apt-cache showsrc mpich 2>/dev/null | grep -q "^Version: $VERSION-"; then return; fi
  [ -f "$f" ] || die "no deb-src entries for mpich and no $f to enable them in; add a deb-src line by hand"
  log "enabling deb-src in $f"
  $SUDO sed -i 's/^Types: deb$/Types: deb deb-src/' "$f"
  $SUDO apt-get update -qq
  apt-cache showsrc mpich 2>/dev/null | grep -q "^Version: $VERSION-" ||
    die "apt has no mpich $VERSION source package (apt-cache showsrc mpich)"
}

fetch() {
  if [ -f "$SRC/.kauri-fetched" ]; then return; fi
  command -v dpkg-source >/dev/null || die "dpkg-source missing: apt-get install dpkg-dev"
  enable_deb_src
  log "fetching the mpich $VERSION source package into $SRC_PARENT"
  rm -rf "$SRC_PARENT"
  mkdir -p "$SRC_PARENT"
  (cd "$SRC_PARENT" && apt-get source -qq mpich >"$CACHE/logs/apt-get-source.log" 2>&1) ||
    { tail -n 20 "$CACHE/logs/apt-get-source.log" >&2; die "apt-get source mpich failed"; }
  [ -x "$SRC/configure" ] || die "apt-get source did not give $SRC/configure"
  [ -f "$SRC/test/mpi/runtests.in" ] || die "$SRC has no test/mpi (the test suite)"
  touch "$SRC/.kauri-fetched"
}

# The configure line of build NAME with PMI flavour PMI.
configure_line() {
  echo "$SRC/configure --prefix=$CACHE/mpich-$VERSION-$1 ${common_options[*]} --with-pmi=$2"
}

# built NAME PMI: true when the prefix holds a build of exactly this configure line.
built() {
  local prefix=$CACHE/mpich-$VERSION-$1
  [ -f "$prefix/$STAMP" ] && [ "$(head -n 1 "$prefix/$STAMP")" = "$(configure_line "$1" "$2")" ] &&
    [ -x "$prefix/bin/mpicc" ]
}

# build NAME PMI MAKE-JOBS
build() {
  local name=$1 pmi=$2 jobs=$3
  local prefix=$CACHE/mpich-$VERSION-$name
  local bdir=$CACHE/build/mpich-$name
  local logf=$CACHE/logs/mpich-$name.log
  local line
  line=$(configure_line "$name" "$pmi")
  log "$name: building into $prefix with make -j$jobs (log: $logf)"
  local t0=$SECONDS
  rm -rf "$prefix" "$bdir"
  mkdir -p "$bdir"
  (
    cd "$bdir"
    $line
    make -j"$jobs"
    make install
  ) >"$logf" 2>&1 || { tail -n 30 "$logf" >&2; die "$name: build failed (see $logf)"; }
  [ -x "$prefix/bin/mpicc" ] || die "$name: no $prefix/bin/mpicc after make install"
  rm -rf "$bdir"
  printf '%s\nbuilt %s in %d s\n' "$line" "$(date -u +%FT%TZ)" $((SECONDS - t0)) >"$prefix/$STAMP"
  log "$name: done in $((SECONDS - t0)) s"
}

main() {
  mkdir -p "$CACHE/logs"
  exec 9>"$CACHE/.build-mpich.lock"
  flock 9
  fetch
  if [ "${1:-}" = "--fetch-only" ]; then return; fi
  local todo=()
  for spec in "ch3-pmi1 simple" "ch3-pmi2 pmi2/simple"; do
    # shellcheck disable=SC2086
    if built $spec; then log "${spec%% *}: already built"; else todo+=("$spec"); fi
  done
  if [ "${#todo[@]}" -eq 2 ] && [ "$JOBS" -ge 2 ]; then
    # Both at once, each with half the CPUs: configure is serial (about 1 m 50 s of each
    # build), so two builds side by side keep every CPU busy where two in a row would not.
    local pids=() rc=0
    for spec in "${todo[@]}"; do
      # shellcheck disable=SC2086
      build $spec $((JOBS / 2)) &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    [ "$rc" = 0 ] || die "a build failed"
  else
    for spec in "${todo[@]}"; do
      # shellcheck disable=SC2086
      build $spec "$JOBS"
    done
  fi
}

main "$@"
