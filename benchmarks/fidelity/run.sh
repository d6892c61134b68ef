#!/usr/bin/env bash
# The fidelity check: install vLLM 0.33.0 and SGLang 0.5.23 (CPU only, own virtual
# environments under benchmarks/fidelity/.engines/), replay the first N requests of a trace
# through their real cache code, prompts only, one request at a time (serial) and by the
# concurrent protocol (arrival times, fixed step time: docs/benchmarks.md "Fidelity"), and
# compare every request's hit with the hycache presets replayed the same way at the same
# byte budgets.
#
#   benchmarks/fidelity/run.sh [PROJECT_PYTHON]
#
# Environment: REQUESTS (2000), BUDGETS in vLLM blocks of 14,155,776 B (4000,12000,40000; empty: none),
# CONCURRENT_BUDGETS (12000; empty: none), STEP_S (0.05 s per concurrent step),
# MODELS (qwen3_next,nemotron_h), TRACE (data/traces/mooncake_conversation.jsonl.gz),
# REUSE=1 to keep engine results already written. Results: benchmarks/fidelity/.engines/work/.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PROJECT_PY="${1:-${PROJECT_PY:-$ROOT/.venv/bin/python}}"
REQUESTS="${REQUESTS:-2000}"
BUDGETS="${BUDGETS-4000,12000,40000}"
CONCURRENT_BUDGETS="${CONCURRENT_BUDGETS-12000}"
STEP_S="${STEP_S:-0.05}"
MODELS="${MODELS:-qwen3_next,nemotron_h}"
TRACE="${TRACE:-$ROOT/data/traces/mooncake_conversation.jsonl.gz}"
BLOCK_BYTES=14155776
ENG="$HERE/.engines"
WORK="$ENG/work"

"$HERE/setup_engines.sh" 2>&1 | grep -v "^WARNING: Location" || true
mkdir -p "$WORK"
EXPORT="$WORK/trace-$(basename "$TRACE" .jsonl.gz)-$REQUESTS.jsonl"
PYTHONPATH="$ROOT/src" "$PROJECT_PY" "$HERE/export_trace.py" \
    --trace "$TRACE" --requests "$REQUESTS" --out "$EXPORT"

run_cell() {  # out engine args...
    local out=$1 engine=$2; shift 2
    if [ "${REUSE:-0}" = 1 ] && [ -s "$out" ]; then return; fi
    local path="$ENG/$engine-src"
    [ "$engine" = sglang ] && path="$path:$ENG/stubs"
    echo "== $(basename "$out" .jsonl)" >&2
    VLLM_TARGET_DEVICE=cpu PYTHONPATH="$path" nice "$ENG/$engine-venv/bin/python" \
        "$HERE/${engine}_harness.py" --trace "$EXPORT" --out "$out" "$@" 2>&1 |
        grep -E "^(vllm|sglang):|Error|error:" >&2 || true
    [ -s "$out" ] || { echo "error: $engine produced no result for $out" >&2; exit 1; }
}

status=0
rm -f "$WORK/disagreements.md"
for model in ${MODELS//,/ }; do
    config="$ROOT/data/configs/$model/config.json"
    cells=()
    for blocks in ${BUDGETS//,/ }; do
        bytes=$((blocks * BLOCK_BYTES))
        for retention in 0 dense; do
            out="$WORK/$model/vllm-$blocks-retention_$retention.jsonl"
            mkdir -p "$WORK/$model"
            run_cell "$out" vllm --model-config "$config" --budget-bytes "$bytes" \
                --retention "$retention"
            cells+=("$out")
        done
        for strategy in no_buffer extra_buffer; do
            out="$WORK/$model/sglang-$blocks-$strategy.jsonl"
            run_cell "$out" sglang --model-config "$config" --budget-bytes "$bytes" \
                --strategy "$strategy"
            cells+=("$out")
        done
    done
    for blocks in ${CONCURRENT_BUDGETS//,/ }; do
        bytes=$((blocks * BLOCK_BYTES))
        out="$WORK/$model/vllm-$blocks-retention_0-concurrent.jsonl"
        run_cell "$out" vllm --model-config "$config" --budget-bytes "$bytes" --retention 0 \
            --mode concurrent --step-s "$STEP_S"
        cells+=("$out")
        out="$WORK/$model/sglang-$blocks-extra_buffer-concurrent.jsonl"
        run_cell "$out" sglang --model-config "$config" --budget-bytes "$bytes" \
            --strategy extra_buffer --mode concurrent --step-s "$STEP_S" --max-running 256
        cells+=("$out")
    done
    echo
    echo "$model, first $REQUESTS requests of $(basename "$TRACE"), prompts only"
    PYTHONPATH="$ROOT/src" "$PROJECT_PY" "$HERE/compare.py" "${cells[@]}" \
        --trace "$TRACE" --model "$config" --diffs 3 --markdown --json "$WORK/$model/compare.json" \
        --disagreements "$WORK/disagreements.md" ||
        status=1
done
exit $status
