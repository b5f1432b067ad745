#!/usr/bin/env bash
# Installs Kauri's PMI client libraries and headers under a prefix:
#   PREFIX/lib/libpmi.so.0  (+ libpmi.so link)     PREFIX/include/pmi.h
#   PREFIX/lib/libpmi2.so.0 (+ libpmi2.so link)    PREFIX/include/pmi2.h
# Usage: contrib/libpmi/install.sh PREFIX   (after cargo build --release -p kauri-pmi1 -p kauri-pmi2)
# PROFILE=debug installs the debug build; CARGO_TARGET_DIR is honoured.
set -euo pipefail
prefix="${1:?usage: $0 PREFIX}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
profile="${PROFILE:-release}"
install -d "$prefix/lib" "$prefix/include"
for name in libpmi libpmi2; do
  built="$target/$profile/$name.so"
  [ -f "$built" ] || { echo "install.sh: $built not found: run cargo build --$profile -p kauri-pmi1 -p kauri-pmi2" >&2; exit 1; }
  install -m 0755 "$built" "$prefix/lib/$name.so.0"
  ln -sf "$name.so.0" "$prefix/lib/$name.so"
done
install -m 0644 "$root/contrib/libpmi/include/pmi.h" "$root/contrib/libpmi/include/pmi2.h" "$prefix/include/"
echo "install.sh: installed into $prefix (lib/libpmi.so.0, lib/libpmi2.so.0, include/pmi.h, include/pmi2.h)"
