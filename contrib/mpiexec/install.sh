#!/bin/sh
# Installs kauri's `mpiexec` wrapper into DIR (default: ~/.local/lib/kauri/mpiexec), a
# directory of its own, so that no other MPI's mpiexec is shadowed until you choose to put DIR
# first in PATH. Refuses to overwrite an `mpiexec` in DIR that is not this wrapper.
#
#   contrib/mpiexec/install.sh [DIR]
set -eu
dir=${1:-${HOME}/.local/lib/kauri/mpiexec}
src=$(dirname "$(readlink -f "$0")")/mpiexec
mkdir -p "$dir"
if [ -e "$dir/mpiexec" ] && ! grep -q "kauri as \`mpiexec\`" "$dir/mpiexec" 2>/dev/null; then
  echo "install.sh: $dir/mpiexec exists and is not kauri's wrapper; not touching it" >&2
  exit 1
fi
cp "$src" "$dir/mpiexec"
chmod 755 "$dir/mpiexec"
echo "installed $dir/mpiexec"
echo "kauri becomes the mpiexec of programs that run with $dir first in PATH, e.g.:"
echo "  PATH=$dir:\$PATH ./my_mpi_program"
first=$(command -v mpiexec 2>/dev/null || true)
if [ -n "$first" ] && [ "$first" != "$dir/mpiexec" ]; then
  echo "(without it, mpiexec is still $first)"
fi
