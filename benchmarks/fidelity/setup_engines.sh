#!/usr/bin/env bash
# Install vLLM 0.33.0 and SGLang 0.5.23 for the fidelity harnesses, CPU only, each in its own
# virtual environment under benchmarks/fidelity/.engines/ (git-ignored; never the project's .venv).
# The engine wheels are unzipped onto PYTHONPATH (never pip-installed: their dependency lists
# pull a CUDA torch); only the pure-Python packages their cache and scheduler modules import are
# installed, with torch pinned to the CPU build.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ENG="$HERE/.engines"
PY="${PY:-python3.11}"
VLLM_VERSION=0.33.0
SGLANG_VERSION=0.5.23
mkdir -p "$ENG/wheels"
echo "torch==2.13.0" > "$ENG/constraints.txt"

fetch() {  # name version -> unzipped folder
    local name=$1 version=$2 dest="$ENG/$1-src"
    if [ -f "$dest/.ok" ]; then return; fi
    ls "$ENG/wheels/$name-$version-"*.whl >/dev/null 2>&1 ||
        "$PY" -m pip download -q --no-deps "$name==$version" -d "$ENG/wheels"
    rm -rf "$dest" && mkdir -p "$dest"
    "$PY" -m zipfile -e "$ENG/wheels/$name-$version-"*.whl "$dest"
    touch "$dest/.ok"
}

venv() {  # name deps...
    local name=$1; shift
    local dir="$ENG/$name-venv"
    if [ -f "$dir/.ok" ]; then return; fi
    "$PY" -m venv "$dir"
    "$dir/bin/pip" install -q -c "$ENG/constraints.txt" torch==2.13.0
    "$dir/bin/pip" install -q -c "$ENG/constraints.txt" "$@"
    if "$dir/bin/pip" list 2>/dev/null | grep -i -E '^(torch|nvidia)' | grep -v -E '^torch +2\.13\.0' ; then
        echo "error: $name venv got a non-CPU torch or CUDA wheels" >&2; exit 1
    fi
    touch "$dir/.ok"
}

fetch vllm "$VLLM_VERSION"
fetch sglang "$SGLANG_VERSION"

venv vllm packaging regex cachetools psutil numpy pydantic msgspec pyzmq cbor2 xxhash blake3 \
    cloudpickle pyyaml urllib3 transformers aiohttp requests openai-harmony openai pillow pybase64 \
    uvloop py-cpuinfo prometheus_client xgrammar fastapi partial_json_parser llguidance einops \
    compressed-tensors

venv sglang msgspec orjson psutil pybase64 requests packaging pillow starlette pydantic pyzmq tqdm \
    aiohttp transformers==5.19.0 dill sentencepiece numpy triton ipython apache-tvm-ffi \
    compressed-tensors gguf openai partial_json_parser

# SGLang imports torchvision at module level (multimodal utils, and transformers' processors
# once it sees a torchvision package); import-only stand-ins suffice: the cache and scheduler
# code never calls them.
STUB="$ENG/stubs/torchvision"
rm -rf "$STUB"
for sub in "" io transforms transforms/functional transforms/v2 transforms/v2/functional ops; do
    mkdir -p "$STUB/$sub"
    cat > "$STUB/$sub/__init__.py" <<'PY'
"""Import-only stand-in for torchvision: every attribute is an inert placeholder."""
__version__ = "0.0.0"


class _Placeholder:
    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder()
PY
done
echo "engines ready under $ENG"
