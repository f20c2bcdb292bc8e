#!/usr/bin/env bash
# Instructions per call of every `peers` case, counted by valgrind's
# callgrind: deterministic, so a loaded machine does not move the figures
# (CPU time does). Each case runs twice, N1 and N2 calls after the same
# set-up; the difference in instructions over N2 - N1 is the cost of one
# call, set-up and start-up cancelled out.
#
#   benches/callgrind.sh                 # table on stdout
#   PEERS_MD=target/peers-instructions.md benches/callgrind.sh
#   N1=1000 N2=11000 CASES="bare resilient_full" benches/callgrind.sh
#
# Needs valgrind (`apt-get install -y valgrind`). Uses CARGO_TARGET_DIR if
# set. A relative PEERS_MD is taken from the workspace root.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
n1="${N1:-1000}"
n2="${N2:-11000}"
if [ "$n2" -le "$n1" ]; then
    echo "callgrind.sh: N2 ($n2) must be larger than N1 ($n1)" >&2
    exit 2
fi
command -v valgrind >/dev/null || {
    echo "callgrind.sh: valgrind not found (apt-get install -y valgrind)" >&2
    exit 2
}

bin="$(cargo bench -p resilient-benches --bench peers --no-run 2>&1 |
    sed -n 's/.*Executable benches\/peers\.rs (\(.*\))$/\1/p' | tail -n 1)"
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "callgrind.sh: could not build or find the peers bench binary" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Total instructions (`Ir`) of one run of case $1 with $2 calls.
count() {
    PEERS_CASE="$1" PEERS_ITERS="$2" valgrind --tool=callgrind \
        --callgrind-out-file="$work/out" "$bin" >/dev/null 2>"$work/log" || {
        cat "$work/log" >&2
        return 1
    }
    sed -n 's/^summary: *\([0-9]*\).*/\1/p; s/^totals: *\([0-9]*\).*/\1/p' "$work/out" | head -n 1
}

cases="${CASES:-$(PEERS_LIST=1 "$bin")}"
: >"$work/counts"
for c in $cases; do
    a="$(count "$c" "$n1")"
    b="$(count "$c" "$n2")"
    per="$(awk -v a="$a" -v b="$b" -v n1="$n1" -v n2="$n2" \
        'BEGIN { printf "%.1f", (b - a) / (n2 - n1) }')"
    echo "  $c: $per instructions/call" >&2
    echo "$c $per" >>"$work/counts"
done

# The bench binary renders the table and the ratios, so the comparisons
# are defined in one place (`RATIOS` in benches/peers.rs).
PEERS_INSTRUCTIONS="$work/counts" "$bin"
