#!/usr/bin/env bash
# The main job, for a newcomer: set everything up, build the bundled example
# the way distributions build (-O2 -fomit-frame-pointer, SFrame on), drop its
# .eh_frame, and show gdb's backtrace without and then with sframe_gdb.py.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

[ "${SFRAME_SKIP_SETUP:-}" = 1 ] || bash scripts/setup.sh

build=$repo/build/demo
mkdir -p "$build"
gcc -O2 -fomit-frame-pointer -Wa,--gsframe examples/demo.c -o "$build/demo"
objcopy --remove-section=.eh_frame --remove-section=.eh_frame_hdr "$build/demo" "$build/demo.noeh"

# Bold headings on a terminal only: piped or saved output stays plain text.
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
gdb_bt() {
    gdb -nx -q -batch -ex 'set style enabled off' -ex 'set pagination off' \
        "$@" -ex 'break stop_here' -ex 'run' -ex 'bt' "$build/demo.noeh" 2>&1 \
        | grep -E '^(#|Backtrace|warning|sframe)' || true
}

say "The example's SFrame section (sframe dump, first function rows)"
"$repo/.venv/bin/sframe" dump "$build/demo.noeh" | sed -n '1,16p'

say "How the caller of parse_record is found, at its call to stop_here (sframe lookup)"
# The return address into parse_record, minus one: inside the call.
ret=$(gdb -nx -q -batch -ex 'break stop_here' -ex run -ex 'p/x $pc' -ex 'frame 1' -ex 'p/x $pc - 1' \
      "$build/demo" 2>/dev/null | awk '/^\$2 = / {print $3}')
base=$(gdb -nx -q -batch -ex 'break stop_here' -ex run -ex 'info proc mappings' "$build/demo" 2>/dev/null \
      | awk -v f="$build/demo" '$NF == f {print $1; exit}')
"$repo/.venv/bin/sframe" lookup "$build/demo.noeh" "$(printf '0x%x' $((ret - base)))"

say "gdb $(gdb --version | head -1 | awk '{print $NF}'), no .eh_frame, WITHOUT the plugin: the backtrace is wrong"
gdb_bt

say "gdb, no .eh_frame, WITH 'source sframe_gdb.py': the backtrace is right"
gdb_bt -ex "source $repo/sframe_gdb.py"
gdb -nx -q -batch -ex 'set style enabled off' -ex "source $repo/sframe_gdb.py" -ex 'break stop_here' \
    -ex run -ex 'info sframe' -ex 'frame 1' -ex 'info sframe $pc - 1' "$build/demo.noeh" 2>&1 \
    | sed -n '/^sframe unwinder/,$p'

say "For reference: the same program with its .eh_frame, plain gdb"
gdb -nx -q -batch -ex 'set style enabled off' -ex 'break stop_here' -ex run -ex bt "$build/demo" 2>&1 | grep -E '^#'
