#!/usr/bin/env bash
# fuzz.sh — runs the libFuzzer targets for fuzz/fuzz.mk: bounded fuzzing, the summary, and the regression pass.
#   fuzz.sh run TARGET SECONDS   fuzz one target on a working copy of its corpus; writes a summary line
#   fuzz.sh summary TARGET...    prints the summary lines; fails when a run found a crash
#   fuzz.sh regress TARGET...    runs each target once over its committed corpus and reproducers
set -u
cd "$(dirname "$0")/.."
out=${FUZZ_DIR:-build/fuzz}
max_len=${FUZZ_MAX_LEN:-4096}

# Fuzzes one target for $2 seconds. New inputs go to $out/corpus/TARGET (kept between runs, seeded
# from the committed corpus); crashes to $out/crashes/TARGET/; the whole log to $out/logs/TARGET.log.
run() {
    local t=$1 seconds=$2
    local work=$out/corpus/$t crashes=$out/crashes/$t log=$out/logs/$t.log
    mkdir -p "$work" "$crashes" "$out/logs"
    cp -n fuzz/corpus/"$t"/* "$work"/ 2>/dev/null
    local dict=()
    [ -f fuzz/dict/"$t".dict ] && dict=(-dict=fuzz/dict/"$t".dict)
    echo "fuzzing $t for ${seconds}s (log: $log)"
    local before
    before=$(ls "$crashes")
    local started=$SECONDS
    "$out/$t" "$work" "${dict[@]}" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
        -artifact_prefix="$crashes/" -print_final_stats=1 ${FUZZ_FLAGS:-} >"$log" 2>&1
    local rc=$?
    local new execs speed cov verdict=ok
    new=$(comm -13 <(echo "$before") <(ls "$crashes") | tr '\n' ' ')
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1)
    [ "$rc" -eq 0 ] && [ -z "$new" ] || verdict="CRASH (exit $rc): $crashes/ $new"
    printf '%-12s %s/%ss  execs %s  exec/s %s  %s  %s\n' "$t" "$((SECONDS - started))" "$seconds" \
        "${execs:-?}" "${speed:-?}" "${cov:-cov: ?}" "$verdict" >"$out/logs/$t.summary"
    cat "$out/logs/$t.summary"
}

summary() {
    local crashed=0
    echo "=== fuzz summary"
    for t in "$@"; do
        if [ -f "$out/logs/$t.summary" ]; then
            cat "$out/logs/$t.summary"
            grep -q CRASH "$out/logs/$t.summary" && crashed=$((crashed + 1))
        else
            echo "$t: did not run"
            crashed=$((crashed + 1))
        fi
    done
    [ "$crashed" -eq 0 ] || echo "$crashed target(s) crashed: see the logs and reproducers above"
    [ "$crashed" -eq 0 ]
}

# Every committed input once: the corpus fuzz/corpus/TARGET/ in one process per target (one process
# per input only when that fails, to name the failing ones), and each crash reproducer in
# fuzz/regressions/TARGET/ on its own. Counts inputs; ends with "fuzz-regress: N passed, N failed".
regress() {
    passed=0 failed=0
    mkdir -p "$out/logs"
    for t in "$@"; do
        local corpus=() reproducers=()
        mapfile -t corpus < <(find fuzz/corpus/"$t" -type f 2>/dev/null | sort)
        mapfile -t reproducers < <(find fuzz/regressions/"$t" -type f 2>/dev/null | sort)
        if [ "${#corpus[@]}" -gt 0 ] && "$out/$t" -runs=0 -timeout=10 "${corpus[@]}" >"$out/logs/regress-$t.log" 2>&1; then
            passed=$((passed + ${#corpus[@]}))
            corpus=()
        fi
        for input in "${corpus[@]}" "${reproducers[@]}"; do
            regress_one "$t" "$input"
        done
    done
    echo "fuzz-regress: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

regress_one() {
    local t=$1 input=$2 log=$out/logs/regress-$1.log
    if "$out/$t" -timeout=10 "$input" >"$log" 2>&1; then
        passed=$((passed + 1))
        return
    fi
    failed=$((failed + 1))
    echo "FAIL $t $input"
    grep -E 'property violated|ERROR: |runtime error|^[a-z_]+\(' "$log" | grep -v 'deadly signal' | head -n 3 | sed 's/^/    /'
}

cmd=${1:-}
shift || true
case $cmd in
run) run "$@" ;;
summary) summary "$@" ;;
regress) regress "$@" ;;
*)
    echo "usage: fuzz.sh run TARGET SECONDS | summary TARGET... | regress TARGET..." >&2
    exit 2
    ;;
esac
