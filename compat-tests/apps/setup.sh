#!/usr/bin/env bash
# What compat-tests/tests/apps.rs needs besides the Debian packages .ci/setup installs
# (lammps, quantum-espresso, python3-petsc4py, python3-h5py-mpi): a pseudopotential for
# Quantum ESPRESSO's silicon, Si.bhs, from the pseudo/ directory of the Debian source
# package of quantum-espresso (the binary package ships none). Kept in
# ${KAURI_CACHE:-$HOME/.cache/kauri}/apps; a no-op once there.
set -euo pipefail
cache=${KAURI_CACHE:-$HOME/.cache/kauri}/apps
want=$cache/pseudo/Si.bhs
[ -s "$want" ] && exit 0
mkdir -p "$cache"
cd "$cache"
if ! ls espresso_*.orig.tar.* >/dev/null 2>&1; then
  apt-get source --download-only quantum-espresso >/dev/null
fi
orig=$(ls espresso_*.orig.tar.*)
rm -rf unpacked
mkdir -p unpacked pseudo
tar -xf "$orig" -C unpacked --wildcards '*/pseudo/Si.bhs'
mv unpacked/*/pseudo/Si.bhs pseudo/
rm -rf unpacked
echo "apps setup: $want"
