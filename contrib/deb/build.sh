#!/usr/bin/env bash
# Builds kauri's Debian package from the workspace:
#   CARGO_TARGET_DIR/debian/kauri_VERSION-1_ARCH.deb   (default target/debian/)
# with /usr/bin/kauri, libpmi.so and libpmi2.so in /usr/lib/kauri, their headers in
# /usr/include/kauri and pkg-config files (kauri-pmi, kauri-pmi2), the man pages and the bash,
# zsh and fish completions (made by the freshly built kauri: this fails if it cannot make
# them), and the docs. The package's metadata is [package.metadata.deb] in Cargo.toml; the
# maintainer scripts (the mpirun/mpiexec alternative) are in contrib/deb/maintainer-scripts.
#
#   contrib/deb/build.sh          then: sudo apt-get install ./target/debian/kauri_*.deb
#
# Needs cargo, strip (binutils) and dpkg-shlibdeps (dpkg-dev, for the dependencies);
# cargo-deb (pinned below) is installed into ${KAURI_CACHE:-~/.cache/kauri} the first time
# (3 minutes of CPU) unless that version is already on PATH.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
stage="$root/target/deb-stage" # Cargo.toml's assets name it as target/deb-stage/
CARGO_DEB_VERSION=3.8.0
say() { echo "build.sh: $*" >&2; }
die() { say "$*"; exit 1; }

for tool in cargo strip objdump dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || die "$tool is required (Debian: apt-get install binutils dpkg-dev)"
done

# cargo-deb, the pinned version: from PATH if it is that one, else from the cache, where it is
# built the first time alongside kauri (their serial tails overlap: a minute less on 2 cores).
cargo_deb_ok() { "$1" deb --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION\|$CARGO_DEB_VERSION"; }
cargo_deb=""
installing=""
trap '[ -z "$installing" ] || kill "$installing" 2>/dev/null || true' EXIT
if command -v cargo-deb >/dev/null && cargo_deb_ok "$(command -v cargo-deb)"; then
  cargo_deb="$(command -v cargo-deb)"
else
  tools="${KAURI_CACHE:-$HOME/.cache/kauri}/cargo-deb-$CARGO_DEB_VERSION"
  cargo_deb="$tools/bin/cargo-deb"
  if ! [ -x "$cargo_deb" ]; then
    say "installing cargo-deb $CARGO_DEB_VERSION into $tools (log: $tools.log)"
    mkdir -p "$(dirname "$tools")"
    # In a temporary target directory of its own (not CARGO_TARGET_DIR, whose lock the
    # build below would wait for).
    env -u CARGO_TARGET_DIR cargo install cargo-deb --locked --version "$CARGO_DEB_VERSION" \
      --root "$tools" >"$tools.log" 2>&1 &
    installing=$!
  fi
fi

say "building kauri, libpmi.so and libpmi2.so (release)"
cargo build --release -p kauri --bin kauri
cargo build --release -p kauri-pmi1 -p kauri-pmi2 --lib
if [ -n "$installing" ]; then
  wait "$installing" || { tail -n 30 "$tools.log" >&2; installing=""; die "cargo install cargo-deb failed"; }
  installing=""
fi
cargo_deb_ok "$cargo_deb" || die "$cargo_deb is not cargo-deb $CARGO_DEB_VERSION"
kauri="$target/release/kauri"
version="$(cargo pkgid -p kauri | sed 's/.*[#@]//')"
[ -n "$version" ] || die "cannot tell kauri's version (cargo pkgid -p kauri)"

rm -rf "$stage"
mkdir -p "$stage/lib" "$stage/pkgconfig" "$stage/man" "$stage/completions"

# The PMI libraries under their sonames, stripped as Debian strips shared libraries.
for name in libpmi libpmi2; do
  strip --strip-unneeded --remove-section=.comment --remove-section=.note \
    -o "$stage/lib/$name.so.0" "$target/release/$name.so"
  objdump -p "$stage/lib/$name.so.0" | grep -q "SONAME *$name\.so\.0$" ||
    die "$target/release/$name.so has no soname $name.so.0"
done
for name in kauri-pmi kauri-pmi2; do
  sed -e "s|@LIBDIR@|/usr/lib/kauri|" -e "s|@INCLUDEDIR@|/usr/include/kauri|" \
    -e "s|@VERSION@|$version|" "contrib/deb/$name.pc.in" >"$stage/pkgconfig/$name.pc"
done

# Man pages and completions, from the binary just built. Any that it cannot make fails the
# build: the package never ships without them.
# The pages are the ones kauri names when asked for one it does not have ("--help-man
# \"?\": no such page (pages: kauri, kauri-agent, ...)"); these five at least.
pages="$("$kauri" --help-man '?' 2>&1 >/dev/null | sed -n 's/.*(pages: \(.*\)).*/\1/p' | tr -d ,)" || true
for page in kauri kauri-agent kauri-nameserver kauri-kvs kauri-pmi; do
  [[ " $pages " == *" $page "* ]] ||
    die "kauri does not list a man page $page ('kauri --help-man ?' lists: ${pages:-nothing})"
done
for page in $pages; do
  "$kauri" --help-man "$page" >"$stage/man/$page.1" ||
    die "'kauri --help-man $page' failed: this kauri cannot make its man pages"
  grep -q '^\.TH ' "$stage/man/$page.1" ||
    die "'kauri --help-man $page' printed no man page (no .TH line)"
done
for shell in bash zsh fish; do
  case $shell in
    bash) out=kauri.bash ;;
    zsh) out=_kauri ;;
    fish) out=kauri.fish ;;
  esac
  "$kauri" --completions "$shell" >"$stage/completions/$out" ||
    die "'kauri --completions $shell' failed: this kauri cannot make its completions"
  [ -s "$stage/completions/$out" ] || die "'kauri --completions $shell' printed nothing"
done
bash -n "$stage/completions/kauri.bash" || die "the bash completion script does not parse"

# One package in the output directory, so that ./target/debian/kauri_*.deb names it.
rm -f "$target/debian/kauri_"*.deb
say "packaging with cargo-deb $CARGO_DEB_VERSION"
PATH="$(dirname "$cargo_deb"):$PATH" cargo deb -p kauri --no-build --strip >/dev/null
deb=("$target/debian/kauri_${version}"-*.deb)
[ -f "${deb[0]}" ] || die "cargo-deb made no $target/debian/kauri_${version}-*.deb"
say "built ${deb[0]}"
echo "${deb[0]}"
