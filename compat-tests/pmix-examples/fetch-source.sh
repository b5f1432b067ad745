#!/usr/bin/env bash
# fetch-source.sh: fetches the source package of the installed libpmix-dev (OpenPMIx), for
# its group examples (examples/group.c, asyncgroup.c, group_dmodex.c, group_lcl_cid.c and
# examples.h), into CACHE/pmix-src/pmix-VERSION (CACHE is ${KAURI_CACHE:-$HOME/.cache/kauri}).
# compat-tests/tests/pmix_groups.rs builds them at test time against the installed library
# (`pkg-config pmix`); nothing of the source package is kept in Kauri's tree.
#
# `apt-get source pmix=DEBIAN_VERSION` (deb-src entries: .ci/setup enables them).
# Idempotent: a no-op once CACHE/pmix-src/pmix-VERSION/examples/group.c exists.
set -euo pipefail

CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
log() { echo "pmix fetch-source: $*" >&2; }
die() { log "error: $*"; exit 1; }

upstream=$(dpkg-query -W -f='${source:Upstream-Version}' libpmix-dev 2>/dev/null) ||
  die "libpmix-dev is not installed (apt-get install libpmix-dev)"
debian=$(dpkg-query -W -f='${source:Version}' libpmix-dev)
dest=$CACHE/pmix-src
src=$dest/pmix-$upstream
if [ -f "$src/examples/group.c" ]; then
  exit 0
fi
mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get source -qq "pmix=$debian" >"$tmp/apt.log" 2>&1) ||
  die "apt-get source pmix=$debian failed: $(grep -m1 -E '^E:' "$tmp/apt.log" || tail -1 "$tmp/apt.log")"
[ -f "$tmp/pmix-$upstream/examples/group.c" ] || die "no examples/group.c in pmix-$upstream"
rm -rf "$src"
mv "$tmp/pmix-$upstream" "$src"
log "pmix $debian from apt-get source"
