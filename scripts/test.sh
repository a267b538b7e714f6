#!/usr/bin/env bash
# Set everything up (apt packages, the virtualenv, gdb 18, lldb 21/22/23),
# then run the linters and the whole test suite against the real debuggers.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
# Debugger tests fail instead of skipping when a debugger is missing.
export SFRAME_REQUIRE_DEBUGGERS=1
.venv/bin/ruff check sframe_core sframe_gdb.py gdb_plugin lldb_plugin tests bench
.venv/bin/mypy  # sframe_core, gdb_plugin, lldb_plugin, sframe_gdb.py: see pyproject.toml
# A base temporary directory of this checkout's own: pytest keeps only the
# three newest of /tmp/pytest-of-USER/pytest-N, so other pytest runs on the
# machine (another checkout's) would delete this run's files under it.
basetemp="${TMPDIR:-/tmp}/sframe-gdb-tests-$(id -u)-$(printf %s "$repo" | md5sum | cut -c1-8)"
# pytest exits 5 when it collected no test: that is a failure here too.
.venv/bin/python -m pytest -ra -p no:cacheprovider --durations=30 --basetemp="$basetemp" "$@"
