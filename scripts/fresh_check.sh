#!/usr/bin/env bash
# What a new user (or CI on a new machine) sees: clone the current commit into a temporary
# folder, give it a fresh HOME and empty caches, and run the README Quickstart's two commands
# there:  pip install hatch && hatch run demo;  pip install hatch && hatch test
# Nothing from this machine's base interpreter, ~/.cache or an earlier run is visible to it,
# so a test that only passes because somebody installed a package by hand fails here.
#
#   usage: scripts/fresh_check.sh [--keep] [--demo-only] [-- PYTEST_ARGS...]
#   e.g.   scripts/fresh_check.sh                    # both commands (10-20 min on 2 cores)
#          scripts/fresh_check.sh -- tests/core      # the demo, then a slice of the suite
#
# Commits only: uncommitted changes are not in the clone (commit, or stash, first).
# Prints each command's exit status, the demo's last lines and pytest's closing counts;
# exits non-zero when either command fails. --keep keeps the folder (logs, venvs).
set -u
keep=0 demo_only=0 pytest_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --keep) keep=1 ;;
        --demo-only) demo_only=1 ;;
        --) shift; pytest_args=("$@"); break ;;
        *) echo "usage: $0 [--keep] [--demo-only] [-- PYTEST_ARGS...]" >&2; exit 2 ;;
    esac
    shift
done
top=$(git rev-parse --show-toplevel) || exit 2
python=$(command -v python3 || command -v python) || { echo "needs python3" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/nnvm-fresh.XXXXXX")
git clone -q "$top" "$work/nnvm" || exit 2
cd "$work/nnvm"
echo "fresh check of $(git rev-parse --short HEAD) in $work (dirty files in $top are not included)"

# a fresh user: new HOME, every cache and config under it, no inherited Python paths
export HOME="$work/home" XDG_CACHE_HOME="$work/home/.cache" XDG_CONFIG_HOME="$work/home/.config"
export XDG_DATA_HOME="$work/home/.local/share" PIP_CACHE_DIR="$work/home/.cache/pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV CONDA_PREFIX OCL_ICD_VENDORS
for v in $(env | grep -oE '^(NNVM|POCL|HATCH)_[A-Z_]*'); do unset "$v"; done
mkdir -p "$HOME"

# pip and hatch in a venv of their own, as a user without a writable system Python would
"$python" -m venv "$work/tools" && source "$work/tools/bin/activate" || exit 2

status=0
start=$(date +%s)
(pip install -q hatch && hatch run demo) > "$work/demo.log" 2>&1
demo=$?
echo "hatch run demo: exit $demo after $(( $(date +%s) - start )) s"
tail -5 "$work/demo.log" | sed 's/^/  | /'
[ "$demo" = 0 ] || status=1

if [ "$demo_only" = 0 ]; then
    start=$(date +%s)
    (pip install -q hatch && hatch test "${pytest_args[@]}") > "$work/test.log" 2>&1 </dev/null
    tests=$?
    echo "hatch test: exit $tests after $(( $(date +%s) - start )) s"
    grep -E "^(FAILED|ERROR) " "$work/test.log" | head -20 | sed 's/^/  | /'
    grep -E "[0-9]+ (passed|failed|error)" "$work/test.log" | tail -1 | sed 's/^/  | /'
    [ "$tests" = 0 ] || status=1
fi

if [ "$keep" = 1 ] || [ "$status" != 0 ]; then
    echo "logs: $work/demo.log $work/test.log (folder kept)"
else
    rm -rf "$work"
fi
exit "$status"
