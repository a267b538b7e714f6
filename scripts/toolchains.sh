#!/usr/bin/env bash
# Fetch real binutils of several Debian suites for REBUILDING the test fixtures
# (CI does not need this: the built fixtures are committed).
#
# Without touching the host's apt sources, each suite's binutils (x86_64 native
# plus aarch64 / s390x cross) is downloaded with a private apt configuration and
# unpacked into $REPO/.toolchains/<name>/root; wrappers
#   as ld readelf objdump objcopy strip nm
# that run each tool through the suite's own dynamic loader are written to
#   $REPO/.toolchains/<name>/bin          (x86_64 native)
#   $REPO/.toolchains/<name>/bin-aarch64  (aarch64-linux-gnu cross)
#   $REPO/.toolchains/<name>/bin-s390x    (s390x-linux-gnu cross, sid only)
# <name>: binutils-2.40 (bookworm, SFrame v1), binutils-2.44 (trixie, v2),
#         binutils-sid (sid snapshot, v3).
# Also installs the host cross compilers (gcc-aarch64-linux-gnu, gcc-s390x-linux-gnu)
# through the host's apt; their drivers are pointed at a suite's gas/ld with -B.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TC="$REPO/.toolchains"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
T0=$(date +%s)
step() { printf '[toolchains %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive

# ---------------------------------------------------------------- host cross compilers
need=()
for p in gcc gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-s390x-linux-gnu libc6-dev-s390x-cross qemu-user file; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  step "host apt: ${need[*]}"
  $SUDO apt-get update -qq >/dev/null
  # qemu-user may be split/renamed on newer releases
  pk=()
  for p in "${need[@]}"; do
    if [ "$p" = qemu-user ] && ! apt-cache show qemu-user >/dev/null 2>&1; then p=qemu-user-binfmt; fi
    pk+=("$p")
  done
  $SUDO apt-get install -y -qq --no-install-recommends "${pk[@]}" >/dev/null
fi

# ---------------------------------------------------------------- per suite
# download DIR SUITE PKG...: the packages and their dependency closure from
# SUITE, through a private apt configuration, unpacked into DIR/root; LDSO is
# then the suite's own dynamic loader, which runs its programs.
download() {
  local d="$1" suite="$2"; shift 2
  local a="$d/apt"
  rm -rf "$d"; mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$d/root"
  echo "deb $MIRROR $suite main" > "$a/sources.list"
  local O=(-o "Dir::Etc::SourceList=$a/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$a/lists" -o "Dir::Cache=$a/cache"
           -o Dir::State::status=/dev/null -o Dir::Etc::Preferences=/dev/null
           -o Dir::Etc::PreferencesParts=/dev/null -o Acquire::Check-Valid-Until=false
           -o APT::Architecture=amd64 -o APT::Architectures::=amd64 -o APT::Get::AllowUnauthenticated=false)
  apt-get "${O[@]}" update -qq >/dev/null
  # --download-only with an empty dpkg status pulls the whole dependency closure
  # (libc6, libbinutils, libsframeN, libctf*, zlib, zstd, jansson, ...).
  apt-get "${O[@]}" install --download-only -y -qq --no-install-recommends "$@" >/dev/null
  local deb; for deb in "$a"/cache/archives/*.deb; do dpkg-deb -x "$deb" "$d/root"; done
  rm -rf "$a/cache"  # keep only the lists (small) to save space
  LDSO="$(find "$d/root" -name 'ld-linux-x86-64.so.2' \( -type f -o -type l \) | sort | head -1)"
  [ -n "$LDSO" ] || { echo "$d: no loader found" >&2; return 1; }
}

# fetch NAME SUITE CROSS...   (CROSS: aarch64 s390x)
fetch() {
  local name="$1" suite="$2"; shift 2
  local d="$TC/$name"
  local pkgs=(binutils-x86-64-linux-gnu)
  local c; for c in "$@"; do pkgs+=("binutils-${c}-linux-gnu"); done
  if [ -f "$d/.done" ] && [ "$(cat "$d/.done")" = "${pkgs[*]}" ]; then
    step "$name: already there"; return 0
  fi
  step "$name: download ($suite) ${pkgs[*]}"
  download "$d" "$suite" "${pkgs[@]}"
  local ldso="$LDSO"
  local lp="$d/root/usr/lib/x86_64-linux-gnu:$d/root/lib/x86_64-linux-gnu"
  mkwrappers() {  # bindir triplet
    local bd="$1" tr="$2" t
    mkdir -p "$bd"
    for t in as ld readelf objdump objcopy strip nm ar ranlib; do
      local real="$d/root/usr/bin/$tr-$t"
      [ "$t" = ld ] && [ -e "$d/root/usr/bin/$tr-ld.bfd" ] && real="$d/root/usr/bin/$tr-ld.bfd"
      [ -e "$real" ] || continue
      cat > "$bd/$t" <<W
#!/bin/sh
# $name ($suite): $tr-$t through the suite's own loader
exec "$ldso" --library-path "$lp" "$real" "\$@"
W
      chmod +x "$bd/$t"
    done
  }
  mkwrappers "$d/bin" x86_64-linux-gnu
  for c in "$@"; do mkwrappers "$d/bin-$c" "$c-linux-gnu"; done
  echo "${pkgs[*]}" > "$d/.done"
  step "$name: $("$d/bin/readelf" --version | head -1)"
}

fetch binutils-2.40 bookworm aarch64
fetch binutils-2.44 trixie aarch64
fetch binutils-sid sid aarch64 s390x

# ---------------------------------------------------------------- mold (sid)
# mold 3.0, the first that merges SFrame v3 sections (tests/fixtures/build_linkers.sh):
# $TC/mold-sid/bin/ld.mold runs it through sid's own loader.
fetch_mold() {
  local d="$TC/mold-sid"
  if [ -f "$d/.done" ]; then step "mold-sid: already there"; return 0; fi
  step "mold-sid: download (sid) mold"
  download "$d" sid mold
  local ldso="$LDSO"
  mkdir -p "$d/bin"
  cat > "$d/bin/ld.mold" <<W
#!/bin/sh
# mold (sid) through sid's own loader
exec "$ldso" --library-path "$d/root/usr/lib/x86_64-linux-gnu:$d/root/lib/x86_64-linux-gnu" "$d/root/usr/bin/mold" "\$@"
W
  chmod +x "$d/bin/ld.mold"
  echo mold > "$d/.done"
  step "mold-sid: $("$d/bin/ld.mold" --version)"
}
fetch_mold

# ---------------------------------------------------------------- verify
step "verify: gcc -B <bin>/ -Wa,--gsframe"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
echo 'int f(int x){return x+1;}' > "$tmp/t.c"
fail=0
check() {  # compiler bindir expected
  local cc="$1" bd="$2" want="$3" got
  if ! "$cc" -B "$bd/" -O2 -Wa,--gsframe -c "$tmp/t.c" -o "$tmp/t.o" 2> "$tmp/err"; then
    echo "  $bd ($cc): compile FAILED: $(head -3 "$tmp/err")"; fail=1; return 0
  fi
  got="$("$bd/readelf" --sframe "$tmp/t.o" | sed -n 's/.*Version: *//p' | head -1)"
  if [ "$got" = "$want" ]; then echo "  ${bd#$REPO/} ($cc): $got ok"
  else echo "  ${bd#$REPO/} ($cc): got '$got', want $want"; fail=1; fi
}
check gcc "$TC/binutils-2.40/bin" SFRAME_VERSION_1
check gcc "$TC/binutils-2.44/bin" SFRAME_VERSION_2
check gcc "$TC/binutils-sid/bin" SFRAME_VERSION_3
check aarch64-linux-gnu-gcc "$TC/binutils-2.40/bin-aarch64" SFRAME_VERSION_1
check aarch64-linux-gnu-gcc "$TC/binutils-2.44/bin-aarch64" SFRAME_VERSION_2
check aarch64-linux-gnu-gcc "$TC/binutils-sid/bin-aarch64" SFRAME_VERSION_3
check s390x-linux-gnu-gcc "$TC/binutils-sid/bin-s390x" SFRAME_VERSION_3
step "done (fail=$fail)"
exit $fail
