#!/usr/bin/env bash
# ShareGPT traces, the Marconi artifact and our presets on them, side by side, then the
# one-change-at-a-time comparison of our marconi preset with the artifact (marconi_stamps.py),
# then ours (no artifact) over ten more samples of the same pool (sharegpt_samples.py): one
# sample is not enough to say whether a policy holds on real chat.
#
#   benchmarks/marconi_reference.sh ARTIFACT_DIR [HYCACHE_PYTHON]
#
# ARTIFACT_DIR: a checkout of github.com/ruipeterpan/marconi (this script clones nothing and
# never changes it). Its imports (scipy, transformers, numpy) go into ARTIFACT_DIR/../marconi-venv
# unless MARCONI_PYTHON names a Python that has them. HYCACHE_PYTHON (default python3) needs the
# 'sim' and 'traces' extras. Traces and results go under .traces/ (git-ignored).
set -euo pipefail
artifact=$(cd "${1:?usage: $0 ARTIFACT_DIR [HYCACHE_PYTHON]}" && pwd)
py=${2:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${MARCONI_PYTHON:-}" ]; then
    venv="$artifact/../marconi-venv"
    [ -x "$venv/bin/python" ] || { python3.11 -m venv "$venv" && "$venv/bin/pip" install -q scipy transformers numpy; }
    MARCONI_PYTHON="$venv/bin/python"
fi
mkdir -p .traces/results
traces=()
for rate in 1 5; do
    "$py" benchmarks/sharegpt_trace.py --sessions-per-s "$rate" --sessions 100 --seed 0 \
        --out ".traces/sharegpt_sps=$rate.jsonl"
    traces+=(--trace ".traces/sharegpt_sps=$rate.jsonl")
done
"$MARCONI_PYTHON" benchmarks/marconi_artifact.py --artifact "$artifact" "${traces[@]}" \
    --capacities 1e9,2e9,3e9,5e9 --json .traces/results/artifact.json
"$py" benchmarks/marconi_reference.py "${traces[@]}" --capacities 1GB,2GB,3GB,5GB \
    --artifact-json .traces/results/artifact.json --json .traces/results/reference.json
# where our marconi preset and the artifact's V2 part (docs/benchmarks.md)
"$py" benchmarks/marconi_stamps.py "${traces[@]}" --capacities 1GB,2GB,3GB,5GB \
    --artifact-json .traces/results/artifact.json
# the same bars over fresh samples (seeds 1-10 of the pool after the first 5,000 conversations)
"$py" benchmarks/sharegpt_samples.py --seeds 1-10 --trace-dir .traces/samples \
    --json .traces/results/samples.json
