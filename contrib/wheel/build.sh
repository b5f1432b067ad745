#!/usr/bin/env bash
# Builds the `kauri-launcher` wheel, the `kauri` executable alone (maturin, bindings = "bin",
# contrib/wheel/pyproject.toml):
#   CARGO_TARGET_DIR/wheels/kauri_launcher-VERSION-py3-none-manylinux_2_34_x86_64.whl
# (default target/wheels/), and prints its path on the last line of standard output.
#
#   contrib/wheel/build.sh      then: pip install target/wheels/kauri_launcher-*.whl
#
# maturin, pinned in setup.sh, is installed by it into ${KAURI_CACHE:-~/.cache/kauri} the first
# time (from the Python registry; a no-op afterwards). maturin builds kauri with cargo
# (release) in the workspace's target directory, so the dependencies a release build made
# before are reused, and links it with `-C strip=symbols` (strip = true). To cargo that link
# is a build of its own, kept beside the unstripped one in target/release/deps:
# target/release/kauri is the stripped one until the next `cargo build --release` puts the
# other back (without linking again).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
CACHE=${KAURI_CACHE:-$HOME/.cache/kauri}
MATURIN_VERSION="$(sed -n 's/^MATURIN_VERSION=//p' "$root/contrib/wheel/setup.sh")"
say() { echo "build.sh: $*" >&2; }
die() { say "$*"; exit 1; }

command -v cargo >/dev/null || die "cargo is required"
"$root/contrib/wheel/setup.sh"
maturin="$CACHE/maturin-$MATURIN_VERSION/bin/maturin"

out="$target/wheels"
mkdir -p "$out"
rm -f "$out"/kauri_launcher-*.whl
say "building the wheel (maturin $MATURIN_VERSION, release)"
(cd "$root/contrib/wheel" && "$maturin" build --release --out "$out") >&2 ||
  die "maturin build failed"
wheels=("$out"/kauri_launcher-*.whl)
[ "${#wheels[@]}" = 1 ] && [ -f "${wheels[0]}" ] || die "expected one wheel in $out, found: ${wheels[*]}"
echo "${wheels[0]}"
