#!/usr/bin/env bash
# fetch-source.sh: fetches the source package of the installed python3-mpi4py, for its test
# suite (test/runtests.py), into CACHE/mpi4py-src/mpi4py-VERSION (CACHE is
# ${KAURI_CACHE:-$HOME/.cache/kauri}). Only the tests are used: they run against the
# installed mpi4py (see README.md next to this file). `apt-get source`, else the same
# version's sdist from PyPI (../fetch-debian-source.sh).
set -euo pipefail
exec "$(dirname "$0")/../fetch-debian-source.sh" python3-mpi4py mpi4py test/runtests.py pypi:mpi4py
