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
LLDB_VERS="${LLDB_FOR_PWNDBG_VERSIONS:-21:21.1.7.post1 22:22.1.0.post3 23:23.1.0.post2}"

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
  # the aarch64 and s390x libcs (real .eh_frame_hdr tables of other ABIs, one
  # big-endian: tests/test_cfi_hdr.py); arch-all packages in Debian 12 and 13
  for p in libc6-arm64-cross libc6-s390x-cross; do
    if apt_has "$p"; then pkgs+=("$p"); fi
  done
  # libsframe: libsframe0 (12), libsframe1 (13), libsframe2/3 later
  for p in libsframe3 libsframe2 libsframe1 libsframe0; do
    if apt_has "$p"; then pkgs+=("$p"); break; fi
  done
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
