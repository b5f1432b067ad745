#!/usr/bin/env bash
# Builds kauri's two Debian packages from the workspace, in CARGO_TARGET_DIR/debian/
# (default target/debian/), and prints their paths, kauri's first:
#   kauri_VERSION-1_ARCH.deb      /usr/bin/kauri, the PMI client libraries libpmi.so.0 and
#                                 libpmi2.so.0 in /usr/lib/kauri, the man pages and the bash,
#                                 zsh and fish completions (made by the freshly built kauri:
#                                 this fails if it cannot make them), and the docs
#   kauri-dev_VERSION-1_ARCH.deb  what building against the libraries needs: the libpmi.so and
#                                 libpmi2.so links, pmi.h and pmi2.h in /usr/include/kauri, the
#                                 pkg-config files kauri-pmi and kauri-pmi2
# kauri's metadata is [package.metadata.deb] in Cargo.toml, built with cargo-deb; its
# maintainer scripts (the mpirun/mpiexec alternative) are in contrib/deb/maintainer-scripts.
# kauri-dev is staged here and built with dpkg-deb from contrib/deb/kauri-dev.control.in:
# cargo-deb would give it kauri's one-line description and no Source, and cannot write
# the exact version into its dependency on kauri.
#
#   contrib/deb/build.sh   then: sudo apt-get install ./target/debian/kauri{,-dev}_*.deb
#
# Needs cargo, strip (binutils), dpkg-deb and dpkg-shlibdeps (dpkg-dev, for the dependencies);
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

for tool in cargo strip objdump dpkg-deb dpkg-shlibdeps md5sum; do
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
mkdir -p "$stage/lib" "$stage/man" "$stage/completions"

# The PMI libraries under their sonames, stripped as Debian strips shared libraries.
for name in libpmi libpmi2; do
  strip --strip-unneeded --remove-section=.comment --remove-section=.note \
    -o "$stage/lib/$name.so.0" "$target/release/$name.so"
  objdump -p "$stage/lib/$name.so.0" | grep -q "SONAME *$name\.so\.0$" ||
    die "$target/release/$name.so has no soname $name.so.0"
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

# One of each package in the output directory, so that ./target/debian/kauri_*.deb names it.
rm -f "$target/debian/kauri_"*.deb "$target/debian/kauri-dev_"*.deb
say "packaging kauri with cargo-deb $CARGO_DEB_VERSION"
PATH="$(dirname "$cargo_deb"):$PATH" cargo deb -p kauri --no-build --strip >/dev/null
deb=("$target/debian/kauri_${version}"-*.deb)
[ -f "${deb[0]}" ] || die "cargo-deb made no $target/debian/kauri_${version}-*.deb"
say "built ${deb[0]}"

# kauri-dev: its version, architecture and maintainer are kauri's, read from the package
# just made; its copyright and changelog are kauri's too (Debian wants both in
# /usr/share/doc/kauri-dev).
field() { dpkg-deb -f "${deb[0]}" "$1"; }
debversion="$(field Version)"
arch="$(field Architecture)"
dev="$stage/dev"
mkdir -p "$dev/DEBIAN" "$dev/usr/lib/kauri" "$dev/usr/include/kauri" "$dev/usr/share/pkgconfig" \
  "$dev/usr/share/doc/kauri-dev" "$dev/usr/share/lintian/overrides" "$stage/kauri-doc"
for name in libpmi libpmi2; do ln -s "$name.so.0" "$dev/usr/lib/kauri/$name.so"; done
cp contrib/libpmi/include/pmi.h contrib/libpmi/include/pmi2.h "$dev/usr/include/kauri/"
for name in kauri-pmi kauri-pmi2; do
  sed -e "s|@LIBDIR@|/usr/lib/kauri|" -e "s|@INCLUDEDIR@|/usr/include/kauri|" \
    -e "s|@VERSION@|$version|" "contrib/deb/$name.pc.in" >"$dev/usr/share/pkgconfig/$name.pc"
done
dpkg-deb --fsys-tarfile "${deb[0]}" |
  tar -x -C "$stage/kauri-doc" ./usr/share/doc/kauri/copyright ./usr/share/doc/kauri/changelog.Debian.gz
cp "$stage/kauri-doc/usr/share/doc/kauri/copyright" \
  "$stage/kauri-doc/usr/share/doc/kauri/changelog.Debian.gz" "$dev/usr/share/doc/kauri-dev/"
cp contrib/deb/kauri-dev.lintian-overrides "$dev/usr/share/lintian/overrides/kauri-dev"
find "$dev" -type d -exec chmod 755 {} +
find "$dev" -type f -exec chmod 644 {} +
(cd "$dev" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$dev/DEBIAN/md5sums"
# Installed-Size as dpkg-gencontrol counts it: KiB per file, rounded up, and 1 per link or
# directory.
size="$(find "$dev/usr" \( -type f -printf '%s\n' \) -o -printf 'x\n' |
  awk '{ n += ($1 == "x") ? 1 : int(($1 + 1023) / 1024) } END { print n }')"
sed -e "s|@VERSION@|$debversion|g" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$(field Maintainer)|" \
  -e "s|@INSTALLED_SIZE@|$size|" contrib/deb/kauri-dev.control.in >"$dev/DEBIAN/control"
chmod 644 "$dev/DEBIAN/control" "$dev/DEBIAN/md5sums"
# Its files dated as kauri's are (cargo-deb: SOURCE_DATE_EPOCH, else Cargo.toml's day).
epoch="${SOURCE_DATE_EPOCH:-$(($(stat -c %Y Cargo.toml) / 86400 * 86400))}"
find "$dev" -exec touch -h -d "@$epoch" {} +
dev_deb="$target/debian/kauri-dev_${debversion}_$arch.deb"
SOURCE_DATE_EPOCH="$epoch" dpkg-deb --root-owner-group -Zxz --build "$dev" "$dev_deb" >/dev/null
say "built $dev_deb"
echo "${deb[0]}"
echo "$dev_deb"
