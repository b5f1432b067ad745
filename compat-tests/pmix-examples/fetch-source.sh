#!/usr/bin/env bash
# fetch-source.sh: fetches the source package of the installed libpmix-dev (OpenPMIx), for
# its group examples (examples/group.c, asyncgroup.c, group_dmodex.c, group_lcl_cid.c and
# examples.h), into CACHE/pmix-src/pmix-VERSION (CACHE is ${KAURI_CACHE:-$HOME/.cache/kauri}).
# compat-tests/tests/pmix_groups.rs builds them at test time against the installed library
# (`pkg-config pmix`). `apt-get source`, else the same version's release tarball from
# OpenPMIx's GitHub releases (../fetch-debian-source.sh).
set -euo pipefail
exec "$(dirname "$0")/../fetch-debian-source.sh" libpmix-dev pmix examples/group.c \
  'https://github.com/openpmix/openpmix/releases/download/v{V}/pmix-{V}.tar.bz2'
