#!/usr/bin/env bash
# Tests kauri's Debian packages, kauri and kauri-dev, on this machine, container-free: builds
# them (contrib/deb/build.sh), checks that each holds its own files and none of the other's,
# installs both with apt-get (so their dependencies resolve), then
#   - runs contrib/examples/hello.c built with mpicc.mpich through /usr/bin/kauri -n 4 and
#     built with mpicc.openmpi through /usr/bin/kauri -n 2 (PMIx), and a PMI-1 and a PMI-2
#     program built with `pkg-config kauri-pmi` / `kauri-pmi2` from kauri-dev (no
#     LD_LIBRARY_PATH: the rpath from the .pc file finds /usr/lib/kauri);
#   - checks that the release binary it packs is a position-independent executable
#     (readelf -h: DYN);
#   - checks that `man kauri` renders, that the installed bash (and fish, zsh) completion completes
#     `kauri -gen`, and that kauri is an mpirun/mpiexec alternative that nobody chose;
#   - runs lintian on both packages: no error, no warning but those overridden with a reason;
#   - purges kauri-dev and checks that its files are gone and kauri's are not, and that the
#     PMI programs built before still run through /usr/bin/kauri;
#   - purges kauri and checks that nothing is left: none of either package's files, no
#     directory they alone made, no alternative, no dpkg record.
# kauri packages installed before are purged first. Needs root or passwordless sudo, and what
# .ci/setup installs (MPICH, Open MPI, pkg-config, man-db, binutils, dpkg-dev, lintian). Exits
# non-zero with a line saying what failed; the packages are purged on the way out either way.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  sudo -n true 2>/dev/null || { echo "test.sh: needs root or passwordless sudo" >&2; exit 1; }
  SUDO="sudo -n"
fi
export DEBIAN_FRONTEND=noninteractive
unset LD_LIBRARY_PATH

passed=0
say() { echo "test.sh: $*"; }
ok() { passed=$((passed + 1)); say "ok: $*"; }
fail() {
  echo "test.sh: FAIL: $*" >&2
  echo "package: $passed passed, 1 failed"
  exit 1
}
# PACKAGE: dpkg's status of it ("installed", "config-files", "not-installed"), or nothing.
status() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true; }
present() { [ -n "$(status "$1")" ] && [ "$(status "$1")" != not-installed ]; }

work="$(mktemp -d /tmp/kauri-deb-test.XXXXXX)"
ours=0
cleanup() {
  local rc=$?
  if [ "$ours" = 1 ] && { present kauri || present kauri-dev; }; then
    say "purging the kauri packages after the failure"
    $SUDO apt-get purge -y -qq kauri kauri-dev >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

# --- packages from before -------------------------------------------------------------
for p in kauri-dev kauri; do
  if present "$p"; then
    say "a $p package is here already ($(status "$p")): purging it first"
    $SUDO apt-get purge -y -qq "$p" >/dev/null
  fi
done

# --- build ----------------------------------------------------------------------------
t0=$SECONDS
bash contrib/deb/build.sh >"$work/built"
[ "$(wc -l <"$work/built")" = 2 ] || { cat "$work/built" >&2; fail "build.sh did not print two packages"; }
deb="$(readlink -f "$(sed -n 1p "$work/built")")"
dev_deb="$(readlink -f "$(sed -n 2p "$work/built")")"
[ -f "$deb" ] && [ "$(dpkg-deb -f "$deb" Package)" = kauri ] || fail "build.sh's first package is not kauri: $deb"
[ -f "$dev_deb" ] && [ "$(dpkg-deb -f "$dev_deb" Package)" = kauri-dev ] ||
  fail "build.sh's second package is not kauri-dev: $dev_deb"
build_s=$((SECONDS - t0))
ok "built $deb and $dev_deb in ${build_s}s"
# kauri-dev is kauri's version and architecture, and needs exactly that kauri.
version="$(dpkg-deb -f "$deb" Version)"
for f in Version Architecture; do
  [ "$(dpkg-deb -f "$dev_deb" "$f")" = "$(dpkg-deb -f "$deb" "$f")" ] ||
    fail "kauri-dev's $f is '$(dpkg-deb -f "$dev_deb" "$f")', kauri's '$(dpkg-deb -f "$deb" "$f")'"
done
[ "$(dpkg-deb -f "$dev_deb" Depends)" = "kauri (= $version)" ] ||
  fail "kauri-dev depends on '$(dpkg-deb -f "$dev_deb" Depends)', not 'kauri (= $version)'"
[ "$(dpkg-deb -f "$dev_deb" Source)" = kauri ] || fail "kauri-dev's source is not kauri"
ok "kauri-dev $version ($(dpkg-deb -f "$dev_deb" Architecture)) depends on kauri (= $version)"
# The release binary build.sh linked: a position-independent executable (its code's address
# randomised on every start).
bin="${CARGO_TARGET_DIR:-target}/release/kauri"
readelf -h "$bin" | grep -q '^ *Type: *DYN' || fail "$bin is not a position-independent executable"
ok "$bin is a position-independent executable"
t1=$SECONDS

# What each package holds ($work/NAME.contents: "TYPE PATH" lines, TYPE d, - or l;
# $work/NAME.paths: the paths), and which of those paths are here before they are installed.
for p in kauri kauri-dev; do
  file="$deb"
  if [ "$p" = kauri-dev ]; then file="$dev_deb"; fi
  dpkg-deb --fsys-tarfile "$file" | tar -tv >"$work/$p.tv"
  awk '{ p = $6; sub(/^\./, "", p); sub(/\/$/, "", p); if (p != "") print substr($1, 1, 1) " " p }' \
    "$work/$p.tv" | sort -k2 >"$work/$p.contents"
  cut -d' ' -f2 "$work/$p.contents" >"$work/$p.paths"
done
sort -u -k2 "$work/kauri.contents" "$work/kauri-dev.contents" >"$work/contents"
cut -d' ' -f2 "$work/contents" >"$work/paths"
while read -r p; do
  if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi
done <"$work/paths" >"$work/before"
expected=(/usr/bin/kauri /usr/lib/kauri/libpmi.so.0 /usr/lib/kauri/libpmi2.so.0
  /usr/share/man/man1/kauri.1.gz /usr/share/man/man1/kauri-agent.1.gz
  /usr/share/man/man1/kauri-pmi.1.gz
  /usr/share/bash-completion/completions/kauri /usr/share/zsh/vendor-completions/_kauri
  /usr/share/fish/vendor_completions.d/kauri.fish /usr/share/doc/kauri/copyright
  /usr/share/doc/kauri/changelog.Debian.gz /usr/share/doc/kauri/README.md
  /usr/share/doc/kauri/docs/design.md)
expected_dev=(/usr/lib/kauri/libpmi.so /usr/lib/kauri/libpmi2.so /usr/include/kauri/pmi.h
  /usr/include/kauri/pmi2.h /usr/share/pkgconfig/kauri-pmi.pc /usr/share/pkgconfig/kauri-pmi2.pc
  /usr/share/doc/kauri-dev/copyright /usr/share/doc/kauri-dev/changelog.Debian.gz)
for f in "${expected[@]}"; do
  grep -qx "$f" "$work/kauri.paths" || fail "the kauri package has no $f"
  if grep -qx "$f" "$work/before"; then fail "$f is on this machine before the package is installed"; fi
done
for f in "${expected_dev[@]}"; do
  grep -qx "$f" "$work/kauri-dev.paths" || fail "the kauri-dev package has no $f"
  if grep -qx "$f" "$work/before"; then fail "$f is on this machine before the package is installed"; fi
done
# Nothing for building against the libraries in kauri, only that in kauri-dev, and no file in
# both (a directory may be in both).
dev_in_kauri="$(grep -E '^/usr/include/|\.pc$|/lib[^/]*\.so$' "$work/kauri.paths" || true)"
[ -z "$dev_in_kauri" ] || fail "kauri holds what belongs in kauri-dev: ${dev_in_kauri//$'\n'/ }"
not_dev="$(grep -v ' /usr/include/\|\.pc$\|/lib[^/]*\.so$\|^d \| /usr/share/doc/kauri-dev/\|/usr/share/lintian/overrides/kauri-dev$' \
  "$work/kauri-dev.contents" || true)"
[ -z "$not_dev" ] || fail "kauri-dev holds more than headers, .pc files, .so links and its doc: ${not_dev//$'\n'/ }"
both="$(grep -v '^d ' "$work/kauri.contents" | cut -d' ' -f2 |
  grep -Fx -f - <(grep -v '^d ' "$work/kauri-dev.contents" | cut -d' ' -f2) || true)"
[ -z "$both" ] || fail "kauri and kauri-dev both hold ${both//$'\n'/ }"
for name in libpmi libpmi2; do
  grep -Fqx "l /usr/lib/kauri/$name.so" "$work/kauri-dev.contents" &&
    grep -q " \./usr/lib/kauri/$name\.so -> $name\.so\.0\$" "$work/kauri-dev.tv" ||
    fail "kauri-dev's /usr/lib/kauri/$name.so is not a link to $name.so.0"
done
ok "kauri holds $(grep -c '^[-l]' "$work/kauri.contents") files and links, the ${#expected[@]} expected among them;" \
  "kauri-dev $(grep -c '^[-l]' "$work/kauri-dev.contents"), the ${#expected_dev[@]} expected among them; none in both"

# The mpirun alternative before (on Debian, /usr/bin/mpiexec is its slave: there is no
# alternative called mpiexec to query).
alt_value() { update-alternatives --query mpirun 2>/dev/null | sed -n 's/^Value: //p'; }
alt_before="$(alt_value)"
mpiexec_before="$(readlink -f /usr/bin/mpiexec 2>/dev/null || true)"

# --- install --------------------------------------------------------------------------
ours=1
$SUDO apt-get install -y -qq "$deb" "$dev_deb" >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; fail "apt-get install $deb $dev_deb"; }
for p in kauri kauri-dev; do
  [ "$(status "$p")" = installed ] || fail "dpkg says $p is '$(status "$p")' after apt-get install"
  dpkg -L "$p" | grep -vx '/\.' | sort >"$work/$p.installed"
  sort "$work/$p.paths" | diff -u - "$work/$p.installed" >"$work/diff" ||
    { cat "$work/diff" >&2; fail "dpkg -L $p differs from the package's contents"; }
done
for f in "${expected[@]}" "${expected_dev[@]}"; do [ -e "$f" ] || fail "$f is missing after the install"; done
# kauri-dev's md5sums (cargo-deb writes none for kauri) match what is installed.
verify="$(dpkg --verify kauri-dev 2>&1)" && [ -z "$verify" ] || fail "dpkg --verify kauri-dev: $verify"
ok "installed: dpkg -L kauri and kauri-dev list their packages' $(wc -l <"$work/kauri.installed")" \
  "and $(wc -l <"$work/kauri-dev.installed") paths, all there"

# --- MPICH and Open MPI through /usr/bin/kauri ------------------------------------------
# NAME COMMAND...: runs COMMAND in $work (2 minutes at most), stdout to NAME.out, stderr to
# NAME.err; fails, showing both, unless it exits 0.
run_job() {
  local name=$1 rc=0
  shift
  (cd "$work" && timeout 120 "$@") >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  [ "$rc" = 0 ] || { cat "$work/$name.out" "$work/$name.err" >&2; fail "'$*' exited $rc"; }
}
# OUT N WHAT: OUT has exactly N hello lines, one from each rank 0..N-1 of N, each summing N.
check_hello() {
  local out=$1 n=$2 what=$3 r
  [ "$(grep -c '^hello from rank ' "$out")" = "$n" ] ||
    { cat "$out" >&2; fail "$what: expected $n hello lines"; }
  for ((r = 0; r < n; r++)); do
    [ "$(grep -c "^hello from rank $r of $n on .* (allreduce: $n)\$" "$out")" = 1 ] ||
      { cat "$out" >&2; fail "$what: no single line from rank $r of $n"; }
  done
}
mpicc.mpich -o "$work/hello-mpich" contrib/examples/hello.c
run_job mpich /usr/bin/kauri -n 4 ./hello-mpich
check_hello "$work/mpich.out" 4 "MPICH hello"
ok "MPICH hello (mpicc.mpich) through /usr/bin/kauri -n 4: $(grep -c '^hello' "$work/mpich.out") ranks"
sed 's/^/    /' "$work/mpich.out"

mpicc.openmpi -o "$work/hello-ompi" contrib/examples/hello.c
run_job ompi /usr/bin/kauri -n 2 ./hello-ompi
check_hello "$work/ompi.out" 2 "Open MPI hello"
ok "Open MPI hello (mpicc.openmpi) through /usr/bin/kauri -n 2: $(grep -c '^hello' "$work/ompi.out") ranks"
sed 's/^/    /' "$work/ompi.out"

# --- programs built with pkg-config kauri-pmi / kauri-pmi2 (kauri-dev) ------------------
# V: runs the PMI-V ring program built below through /usr/bin/kauri -n 3, after checking that
# it loads Kauri's library from /usr/lib/kauri; fails unless each rank gets its neighbour's key.
run_ring() {
  local v=$1 lib=libpmi.so.0 resolved r
  if [ "$v" = 2 ]; then lib=libpmi2.so.0; fi
  resolved="$(ldd "$work/pmi$v-ring" | awk -v l="$lib" '$1 == l { print $3 }')"
  [ "$resolved" = "/usr/lib/kauri/$lib" ] ||
    fail "pmi$v-ring loads $lib from '$resolved', not /usr/lib/kauri (ldd: $(ldd "$work/pmi$v-ring" | tr '\n' ' '))"
  run_job "pmi$v" /usr/bin/kauri -n 3 "./pmi$v-ring"
  for r in 0 1 2; do echo "pmi$v rank $r of 3 got \"from rank $(((r + 1) % 3))\""; done >"$work/pmi$v.want"
  sort "$work/pmi$v.out" | diff -u "$work/pmi$v.want" - >&2 ||
    fail "pmi$v-ring's output under /usr/bin/kauri -n 3 is not the ring's"
}
for v in 1 2; do
  pc=kauri-pmi
  if [ "$v" = 2 ]; then pc=kauri-pmi2; fi
  [ "$(pkg-config --variable=pcfiledir "$pc")" = /usr/share/pkgconfig ] ||
    fail "pkg-config finds $pc in '$(pkg-config --variable=pcfiledir "$pc")', not kauri-dev's /usr/share/pkgconfig"
  [ "$(pkg-config --modversion "$pc")" = "${version%-*}" ] ||
    fail "pkg-config --modversion $pc is '$(pkg-config --modversion "$pc")', not ${version%-*}"
  # shellcheck disable=SC2046 # pkg-config's flags are words
  cc -o "$work/pmi$v-ring" "contrib/deb/test/pmi$v-ring.c" $(pkg-config --cflags --libs "$pc")
  run_ring "$v"
  ok "PMI-$v program built with 'pkg-config --cflags --libs $pc' loads /usr/lib/kauri/libpmi${v#1}.so.0 and runs 3 ranks"
done

# --- man pages, completion --------------------------------------------------------------
[ "$(man -w kauri)" = /usr/share/man/man1/kauri.1.gz ] || fail "man -w kauri is '$(man -w kauri 2>&1)'"
MANWIDTH=80 man kauri >"$work/man.txt" 2>"$work/man.err" || { cat "$work/man.err" >&2; fail "man kauri"; }
[ ! -s "$work/man.err" ] || { cat "$work/man.err" >&2; fail "man kauri wrote to stderr"; }
for want in '^NAME' '^ *kauri' '^SYNOPSIS' '-genv' '-launcher'; do
  grep -q -e "$want" "$work/man.txt" || { head -40 "$work/man.txt" >&2; fail "man kauri has no '$want'"; }
done
long="$(awk 'length > 80' "$work/man.txt" | wc -l)"
ok "man kauri renders: $(wc -l <"$work/man.txt") lines at MANWIDTH=80 ($long longer), NAME, SYNOPSIS, -genv, -launcher"
others=()
for page in /usr/share/man/man1/kauri-*.1.gz; do
  name="$(basename "$page" .1.gz)"
  [ "$(man -w "$name")" = "$page" ] || fail "man -w $name is not $page"
  MANWIDTH=80 man "$name" 2>&1 | grep -q '^NAME' || fail "man $name does not render"
  others+=("$name")
done
[ "${#others[@]}" -ge 3 ] || fail "only ${#others[@]} man pages besides kauri's: ${others[*]}"
ok "man renders ${others[*]} too"

# Completion as bash-completion runs it: the function `complete -p kauri` names, with the
# words of `kauri -gen` and the cursor at its end.
bash -c '
  source /usr/share/bash-completion/completions/kauri
  fn="$(complete -p kauri | sed -n "s/.* -F \([^ ]*\) .*/\1/p")"
  [ -n "$fn" ] || { echo "no completion function for kauri" >&2; exit 1; }
  COMP_LINE="kauri -gen"; COMP_POINT=${#COMP_LINE}; COMP_WORDS=(kauri -gen); COMP_CWORD=1
  COMPREPLY=()
  "$fn" kauri -gen kauri
  printf "%s\n" "${COMPREPLY[@]}"
' >"$work/complete.out" || fail "the bash completion of 'kauri -gen' failed"
for want in -genv -genvall -genvlist -genvnone; do
  grep -qx -- "$want" "$work/complete.out" || { cat "$work/complete.out" >&2; fail "'kauri -gen<TAB>' does not offer $want"; }
done
if grep -v -- '^-gen' "$work/complete.out" | grep -q .; then
  cat "$work/complete.out" >&2
  fail "'kauri -gen<TAB>' offers words that do not start with -gen"
fi
ok "bash: 'kauri -gen<TAB>' offers $(tr '\n' ' ' <"$work/complete.out")"
# fish finds the installed file by itself (vendor_completions.d); zsh's must parse and be on
# zsh's own fpath. Checked when those shells are here (.ci/setup installs both).
if command -v fish >/dev/null; then
  mkdir -p "$work/home"
  HOME="$work/home" XDG_CONFIG_HOME="$work/home" fish -c 'complete -C "kauri -gen"' |
    cut -f1 | sort >"$work/fish.out" || fail "fish: complete -C 'kauri -gen' failed"
  printf '%s\n' -genv -genvall -genvlist -genvnone | diff -u - "$work/fish.out" >&2 ||
    fail "fish: 'kauri -gen<TAB>' does not offer exactly -genv, -genvall, -genvlist, -genvnone"
  ok "fish: 'kauri -gen<TAB>' offers $(tr '\n' ' ' <"$work/fish.out")"
fi
if command -v zsh >/dev/null; then
  zsh -n /usr/share/zsh/vendor-completions/_kauri || fail "zsh: the installed _kauri does not parse"
  [ "$(head -n 1 /usr/share/zsh/vendor-completions/_kauri)" = "#compdef kauri" ] ||
    fail "zsh: _kauri does not start with '#compdef kauri'"
  zsh -fc 'print -l $fpath' | grep -qx /usr/share/zsh/vendor-completions ||
    fail "zsh: /usr/share/zsh/vendor-completions is not on zsh's fpath"
  ok "zsh: _kauri parses, is '#compdef kauri', and its directory is on zsh's fpath"
fi

# --- the alternative ------------------------------------------------------------------
update-alternatives --query mpirun >"$work/alt.txt" || fail "no mpirun alternative after the install"
grep -qx 'Alternative: /usr/bin/kauri' "$work/alt.txt" || { cat "$work/alt.txt" >&2; fail "kauri is not an mpirun alternative"; }
awk '/^Alternative: \/usr\/bin\/kauri$/ { k = 1; next } k && /^Slaves:/ { s = 1; next }
     k && s && /^ mpiexec \/usr\/bin\/kauri$/ { found = 1 } /^$/ { k = 0; s = 0 }
     END { exit !found }' "$work/alt.txt" || { cat "$work/alt.txt" >&2; fail "kauri's mpirun alternative has no mpiexec slave"; }
prio="$(awk '/^Alternative: /{ a = $2 } /^Priority: / && a == "/usr/bin/kauri" { print $2 }' "$work/alt.txt")"
[ -n "$prio" ] || { cat "$work/alt.txt" >&2; fail "kauri's mpirun alternative has no priority"; }
if [ -n "$alt_before" ]; then
  [ "$(alt_value)" = "$alt_before" ] || fail "the mpirun alternative changed from $alt_before to $(alt_value)"
  [ "$(readlink -f /usr/bin/mpiexec)" = "$mpiexec_before" ] || fail "/usr/bin/mpiexec changed from $mpiexec_before"
  awk -v p="$prio" '/^Alternative: /{ a = $2 } /^Priority: / && a != "/usr/bin/kauri" && $2 <= p { bad = 1 }
       END { exit bad }' "$work/alt.txt" ||
    fail "kauri's priority $prio is not below every other mpirun alternative's"
  ok "mpirun/mpiexec alternative: /usr/bin/kauri at priority $prio, the choice is still $alt_before"
else
  [ "$(alt_value)" = /usr/bin/kauri ] || fail "kauri is the only mpirun alternative but not the chosen one"
  ok "mpirun/mpiexec alternative: /usr/bin/kauri at priority $prio, the only one"
fi

# --- lintian (.ci/setup installs it; CI fails without it) -------------------------------
# No error and no warning on either package: a warning kauri accepts is overridden in the
# package, with its reason on the comment line above it (contrib/deb/PACKAGE.lintian-overrides),
# which lintian prints as an N: line before the overridden tag's O: line.
if command -v lintian >/dev/null; then
  lintian --tag-display-limit 0 --show-overrides "$deb" "$dev_deb" >"$work/lintian.txt" 2>&1 || true
  sed 's/^/    /' "$work/lintian.txt"
  if grep -q '^[EW]:' "$work/lintian.txt"; then fail "lintian reports errors or warnings"; fi
  awk '/^O: / && prev !~ /^N: ./ { bad = 1; print "no reason for: " $0 } { prev = $0 } END { exit bad }' \
    "$work/lintian.txt" >&2 || fail "a lintian override has no written reason"
  ok "lintian on kauri and kauri-dev: no error, no warning, $(grep -c '^O: ' "$work/lintian.txt") overridden with a reason"
elif [ "${CI:-}" = true ]; then
  fail "lintian is not installed (.ci/setup installs it)"
fi

# --- kauri-dev removed: its files go, the runtime stays ----------------------------------
$SUDO apt-get purge -y -qq kauri-dev >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get purge kauri-dev"; }
if dpkg -s kauri-dev >/dev/null 2>&1 || present kauri-dev; then
  fail "dpkg still knows kauri-dev after its purge ($(status kauri-dev))"
fi
[ "$(status kauri)" = installed ] || fail "purging kauri-dev left kauri '$(status kauri)'"
left=()
while read -r type p; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    # A directory kauri holds too, or that was here before, stays; nothing else may.
    if [ "$type" != d ] || ! grep -qx "$p" "$work/kauri.paths" "$work/before"; then left+=("$p"); fi
  fi
done <"$work/kauri-dev.contents"
[ "${#left[@]}" = 0 ] || fail "left after purging kauri-dev: ${left[*]}"
ls /var/lib/dpkg/info/kauri-dev.* >/dev/null 2>&1 && fail "left after purging kauri-dev: $(ls /var/lib/dpkg/info/kauri-dev.*)"
for p in kauri-pmi kauri-pmi2; do
  if pkg-config --exists "$p"; then fail "pkg-config still finds $p after purging kauri-dev"; fi
done
while read -r p; do
  [ -e "$p" ] || [ -L "$p" ] || fail "purging kauri-dev removed kauri's $p"
done <"$work/kauri.paths"
grep -qx 'Alternative: /usr/bin/kauri' <(update-alternatives --query mpirun) ||
  fail "purging kauri-dev took kauri out of the mpirun alternative"
for v in 1 2; do run_ring "$v"; done
ok "kauri-dev purged: its $(grep -c '^[-l]' "$work/kauri-dev.contents") files and links gone, pkg-config" \
  "finds neither kauri-pmi nor kauri-pmi2, kauri's $(wc -l <"$work/kauri.contents") paths all there, and the" \
  "PMI-1 and PMI-2 programs built before still run 3 ranks through /usr/bin/kauri"

# --- purge, and nothing left ----------------------------------------------------------
$SUDO apt-get purge -y -qq kauri >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get purge kauri"; }
present kauri-dev && fail "kauri-dev is '$(status kauri-dev)' after the purges"
ours=0
if dpkg -s kauri >"$work/dpkg-s" 2>&1; then fail "dpkg -s kauri still knows it: $(head -3 "$work/dpkg-s")"; fi
grep -q "not installed" "$work/dpkg-s" || fail "dpkg -s kauri says: $(cat "$work/dpkg-s")"
left=()
while read -r type p; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    # A directory that was here before (/usr/bin, ...) stays; nothing else may.
    if [ "$type" != d ] || ! grep -qx "$p" "$work/before"; then left+=("$p"); fi
  fi
done <"$work/contents"
[ "${#left[@]}" = 0 ] || fail "left after the purge: ${left[*]}"
ls /var/lib/dpkg/info/kauri.* /var/lib/dpkg/info/kauri-dev.* >/dev/null 2>&1 &&
  fail "left after the purge: $(ls /var/lib/dpkg/info/kauri.* /var/lib/dpkg/info/kauri-dev.* 2>/dev/null)"
if update-alternatives --query mpirun 2>/dev/null | grep -q kauri; then fail "kauri is still an mpirun alternative"; fi
stray="$(find /etc/alternatives /usr/bin /usr/share/man/man1 -maxdepth 1 -lname '*kauri*' 2>/dev/null)"
[ -z "$stray" ] || fail "links to kauri left after the purge: $stray"
[ "$(alt_value)" = "$alt_before" ] || fail "the mpirun alternative is '$(alt_value)' after the purge, not '$alt_before'"
[ "$(readlink -f /usr/bin/mpiexec 2>/dev/null || true)" = "$mpiexec_before" ] || fail "/usr/bin/mpiexec changed"
ok "purged: none of the packages' $(wc -l <"$work/contents") paths left but the directories that were here before, no alternative, dpkg -s: $(head -1 "$work/dpkg-s")"

say "build ${build_s}s, install/run/purge $((SECONDS - t1))s"
echo "package: $passed passed, 0 failed"
