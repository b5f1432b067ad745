#!/usr/bin/env bash
# fetch-debian-source.sh BINARY SOURCE FILE [FALLBACK-URL]: fetches the Debian source package
# SOURCE of the installed package BINARY (same version) into
# CACHE/SOURCE-src/SOURCE-UPSTREAM (CACHE is ${KAURI_CACHE:-$HOME/.cache/kauri}), where FILE
# (a path inside the unpacked tree) must then exist. Used by mpi4py-suite/fetch-source.sh and
# pmix-examples/fetch-source.sh; nothing of a source package is kept in Kauri's tree.
#
# `apt-get source SOURCE=DEBIAN_VERSION` (deb-src entries: .ci/setup enables them). A mirror
# that serves the index but not the tarballs (seen: 404 on mpi4py_3.1.4.orig.tar.gz) is worked
# around with the same upstream version from FALLBACK-URL (`{V}` stands for the upstream
# version; a `pypi:NAME` URL means `pip download NAME==V`, the sdist): the same files,
# without Debian's patches.
# Idempotent: a no-op once FILE exists.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 BINARY SOURCE FILE [FALLBACK-URL]" >&2; exit 2; }
binary=$1 source=$2 file=$3 fallback=${4:-}
CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
log() { echo "$source fetch-source: $*" >&2; }
die() { log "error: $*"; exit 1; }

upstream=$(dpkg-query -W -f='${source:Upstream-Version}' "$binary" 2>/dev/null) ||
  die "$binary is not installed (apt-get install $binary)"
debian=$(dpkg-query -W -f='${source:Version}' "$binary")
dest=$CACHE/$source-src
src=$dest/$source-$upstream
if [ -f "$src/$file" ]; then
  exit 0
fi
mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if (cd "$tmp" && apt-get source -qq "$source=$debian" >"$tmp/apt.log" 2>&1) &&
  [ -f "$tmp/$source-$upstream/$file" ]; then
  log "$source $debian from apt-get source"
else
  why=$(grep -m1 -E '^E:' "$tmp/apt.log" || echo "no $file in it")
  [ -n "$fallback" ] || die "apt-get source $source=$debian failed: $why"
  url=${fallback//\{V\}/$upstream}
  log "apt-get source $source=$debian failed ($why); trying $url"
  rm -rf "${tmp:?}/$source-$upstream"
  case $url in
    pypi:*)
      python3 -m pip download -q --no-deps --no-binary :all: "${url#pypi:}==$upstream" -d "$tmp/dl" \
        >"$tmp/dl.log" 2>&1 || die "pip download ${url#pypi:}==$upstream failed: $(tail -3 "$tmp/dl.log")"
      ;;
    *)
      mkdir -p "$tmp/dl"
      curl -fsSL --retry 3 -o "$tmp/dl/${url##*/}" "$url" || die "cannot download $url"
      ;;
  esac
  mkdir -p "$tmp/x"
  tar -xf "$tmp/dl/"* -C "$tmp/x"
  top=$(find "$tmp/x" -mindepth 1 -maxdepth 1 -type d | head -1)
  [ -n "$top" ] && [ -f "$top/$file" ] || die "no $file in $url"
  mv "$top" "$tmp/$source-$upstream"
  log "$source $upstream from $url"
fi
rm -rf "$src"
mv "$tmp/$source-$upstream" "$src"
