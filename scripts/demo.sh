#!/usr/bin/env bash
# The main job, for a newcomer: set everything up, build the bundled example
# the way distributions build (-O2 -fomit-frame-pointer, SFrame on), drop its
# .eh_frame, and show what gdb and LLDB make of it without and then with the
# plugin, next to what they make of the twin that kept its .eh_frame; plain gdb
# served the stripped example's file by a debuginfod; then `sframe verify` on
# the example and on a copy with one wrong row.
# tests/test_demo.py runs it and checks each section's key lines.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

[ "${SFRAME_SKIP_SETUP:-}" = 1 ] || bash scripts/setup.sh

build=${SFRAME_DEMO_BUILD:-$repo/build/demo}
lldb=${SFRAME_DEMO_LLDB:-$repo/.debuggers/bin/lldb-23}
mkdir -p "$build"
gcc -O2 -g -fomit-frame-pointer -Wa,--gsframe examples/demo.c -o "$build/demo"
objcopy --remove-section=.eh_frame --remove-section=.eh_frame_hdr "$build/demo" "$build/demo.noeh"

# The debuggers' symbol files go to a cache of the demo's own, emptied first:
# every run makes them as a first session does, and the user's cache is left alone.
export XDG_CACHE_HOME=$build/cache
rm -rf "$XDG_CACHE_HOME"
# gdb makes the symbol file before it goes on, whatever the machine's load.
export SFRAME_GDB_SYMBOL_FILES=foreground
# This checkout's sframe_core, whatever the virtualenv has installed.
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
sframe() { "$repo/.venv/bin/sframe" "$@"; }

# Bold headings on a terminal only: piped or saved output stays plain text.
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
look() { printf 'Look at: %s\n' "$*"; }
sub() { printf -- '-- %s\n' "$*"; }

# What each debugger is asked, stopped in stop_here (frame 2 is read_records,
# whose variables live in callee-saved registers that parse_record saved).
gdb_cmds=(bt 'frame 2' 'info registers rbx rbp r12 r13' 'info locals')
lldb_cmds=(bt 'frame select 2' 'register read rbx rbp r12 r13' 'frame variable')

# gdb in batch mode on FILE, after the options before it; each command's
# output under "(gdb) COMMAND", without gdb's chatter and the source lines.
gdb_run() {
    local file=$1; shift
    local args=(-nx -q -batch -iex 'set debuginfod enabled off' -ex 'set style enabled off'
                -ex 'set pagination off' "$@" -ex 'break stop_here' -ex run)
    local c
    for c in "${gdb_cmds[@]}" "${gdb_extra[@]}"; do args+=(-ex "echo (gdb) $c\n" -ex "$c"); done
    gdb "${args[@]}" "$file" 2>&1 \
        | grep -vE '^(\[|Breakpoint 1|Using host libthread_db|$|[0-9]+[[:space:]])' || true
}
# LLDB in batch mode (TERM=dumb: no statusline, which LLDB 21 can deadlock on);
# its transcript from the first command asked, without the source listings.
lldb_run() {
    local file=$1; shift
    local args=(--no-lldbinit --no-use-colors -b -O 'settings set show-statusline false' "$@"
                -o "target create $file" -o 'b stop_here' -o 'process launch')
    local c
    for c in "${lldb_cmds[@]}" "${lldb_extra[@]}"; do args+=(-o "$c"); done
    TERM=dumb "$lldb" "${args[@]}" 2>&1 | sed -n '/^(lldb) bt$/,$p' \
        | grep -vE '^( *->)? +[0-9]+ |^[[:space:]]+\^' || true
}
gdb_extra=() lldb_extra=()

say "The example's SFrame section (sframe dump: the header, then parse_record's rows)"
look "each row gives, from its PC on, where the CFA is (sp or fp + N), where the FP is (c-16: at CFA - 16; u: not saved) and the RA (f: at the fixed CFA - 8)."
fn=$(nm "$build/demo.noeh" | awk '$3 == "parse_record" {print $1}')
sframe dump "$build/demo.noeh" \
    | awk -v pc="pc = 0x$fn," 'BEGIN {sub(/0x0+/, "0x", pc)} /Function Index/ {head = 1}
           !head && NF; index($0, pc) {show = 1} show && !NF {exit} show'

say "How the caller of parse_record is found, at its call to stop_here (sframe lookup)"
look "the CFA rule, and where parse_record saved its caller's rbx, r12, r13 (from its machine code)."
# The return address into parse_record, minus one (inside the call), in the file.
read -r ret base < <(gdb -nx -q -batch -iex 'set debuginfod enabled off' -ex 'break stop_here' -ex run \
    -ex 'frame 1' -ex 'p/x $pc - 1' -ex 'info proc mappings' "$build/demo" 2>/dev/null \
    | awk -v f="$build/demo" '/^\$1 = / {ret = $3} $NF == f && !base {base = $1} END {print ret, base}')
sframe lookup "$build/demo.noeh" "$(printf '0x%x' $((ret - base)))"

gdb_version=$(gdb --version | head -1 | awk '{print $NF}')
say "gdb $gdb_version: bt, and read_records' registers and variables (frame 2)"
look "without the plugin the stack ends in ?? and rbx and i (and more) are wrong;" \
     "with it, every frame and value is the twin's."
sub "demo.noeh (no .eh_frame), WITHOUT the plugin"
gdb_run "$build/demo.noeh"
sub "demo.noeh, WITH 'source sframe_gdb.py'"
gdb_extra=('info sframe')
gdb_run "$build/demo.noeh" -ex "source $repo/sframe_gdb.py"
gdb_extra=()
sub "the twin, demo (with .eh_frame), plain gdb"
gdb_run "$build/demo"

# Many machines (docs/debuginfod.md): demo.noeh stripped as distributions ship
# it, served by a debuginfod on a free loopback port, stopped after each gdb.
serve_gdb() {  # DIR: what the server scans
    local dir=$1 port pid
    command -v debuginfod >/dev/null || { echo "debuginfod is not installed (scripts/setup.sh installs it)"; return; }
    port=$("$repo/.venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    debuginfod -F -p "$port" -d "$dir.sqlite" -t 0 -g 0 --disable-source-scan "$dir" >"$dir.log" 2>&1 &
    pid=$!
    "$repo/.venv/bin/python" -c 'import sys, time, urllib.request as u
for _ in range(600):
    try: u.urlopen(sys.argv[1], timeout=2); break
    except Exception: time.sleep(0.1)' "http://127.0.0.1:$port/buildid/$(readelf -n "$build/demo.strip" | awk '/Build ID/ {print $3}')/debuginfo"
    DEBUGINFOD_URLS=http://127.0.0.1:$port DEBUGINFOD_CACHE_PATH=$dir.cache \
        gdb_run "$build/demo.strip" -iex 'set debuginfod enabled on'
    kill "$pid"; wait "$pid" || true
}
say "Many machines: plain gdb $gdb_version fetches the debug file from a debuginfod (no plugin)"
look "demo.strip (demo.noeh stripped, its debug information in dbg/demo.debug) served its debug file alone" \
     "ends in ??; served sframe to-dwarf's file (that debug information and the .debug_frame), every frame and value is the twin's."
rm -rf "$build"/{dbg,served}{,.sqlite,.cache,.log} && mkdir "$build/dbg"
# (objcopy warns of the layout the removed .eh_frame left: nothing lost)
objcopy --only-keep-debug "$build/demo.noeh" "$build/dbg/demo.debug" 2>/dev/null
strip --strip-unneeded -o "$build/demo.strip" "$build/demo.noeh"
objcopy --add-gnu-debuglink="$build/dbg/demo.debug" "$build/demo.strip"
sub "served dbg/demo.debug alone (what a distribution's debuginfod has)"
serve_gdb "$build/dbg"
sub "served: sframe to-dwarf demo.strip --debug-file dbg/demo.debug --build-id-dir served"
sframe to-dwarf "$build/demo.strip" --debug-file "$build/dbg/demo.debug" \
    --build-id-dir "$build/served" >/dev/null
serve_gdb "$build/served"

lldb_version=$("$lldb" --version | head -1 | awk '{print $NF}')
say "LLDB $lldb_version: bt, and read_records' registers and variables (frame 2)"
look "without the plugin LLDB's bt stops at read_records (it cannot unwind out of load_config.cold)," \
     "though its instruction emulation reads frame 2 right; with it, every frame and value is the twin's."
sub "demo.noeh (no .eh_frame), WITHOUT the plugin"
lldb_run "$build/demo.noeh"
sub "demo.noeh, WITH 'command script import lldb_plugin'"
lldb_extra=('sframe status')
lldb_run "$build/demo.noeh" -o "command script import $repo/lldb_plugin"
lldb_extra=()
sub "the twin, demo (with .eh_frame), plain LLDB"
lldb_run "$build/demo"

say "sframe verify: is the .sframe right? (checked against the same file's .eh_frame)"
look "the example is OK (exit 0); the copy with one wrong row names the function and its first wrong PC (exit 1)."
sub "the example, demo"
cd "$build"
status=0; sframe verify demo || status=$?
echo "exit $status"
sub "a copy with one planted wrong row, demo.bad"
"$repo/.venv/bin/python" "$repo/scripts/plant_defect.py" demo read_records demo.bad
status=0; sframe verify demo.bad || status=$?
echo "exit $status"
