# Two entry points: `make run` and `make test`. Both create .venv on a fresh machine.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
# the optional compiled build (setup.py, HYCACHE_COMPILE=1): its own environment, rebuilt
# whenever a source file changes
FAST := .venv-fast
STAMP_FAST := $(FAST)/.installed
SOURCES := $(shell find src -name '*.py') setup.py pyproject.toml

.PHONY: run test lint typecheck pytest clean fidelity redis-server fast

$(BIN)/python:
	$(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[sim]'
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,engine,serve,redis,sim,ray,traces]'
	touch $@ $(STAMP_RUN)

# The same package with the cache's hot core compiled to C by mypyc (needs a C compiler; a
# few minutes on 2 cores). Run it as .venv-fast/bin/hycache; tests/test_compiled.py checks it
# gives the pure build's results.
$(STAMP_FAST): $(SOURCES)
	rm -rf $(FAST) build
	$(PY) -m venv $(FAST) || python3 -m venv $(FAST)
	$(FAST)/bin/pip install -q --upgrade pip setuptools wheel 'mypy>=1.10'
	HYCACHE_COMPILE=1 $(FAST)/bin/pip install -q --no-build-isolation '.[sim]'
	rm -rf build
	touch $@

fast: $(STAMP_FAST)

# The tier tests start their own redis-server (Debian's package) on a free loopback port.
redis-server:
	@command -v redis-server >/dev/null || { \
		echo "redis-server is missing: installing Debian's package (apt-get install -y redis-server)"; \
		apt-get install -y redis-server || { apt-get update && apt-get install -y redis-server; }; }

run: $(STAMP_RUN)
	$(BIN)/hycache conformance
	$(BIN)/hycache compare --workload chat --requests 200 --model qwen3-next-80b-a3b \
		--capacities 10%,20%,40%,80% --report report.html --json report.json

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP_DEV)
	$(BIN)/mypy

pytest: $(STAMP_DEV) $(STAMP_FAST) redis-server
	$(BIN)/pytest

test: lint typecheck pytest

# Presets against the real engines' cache code. NOT part of `make test`: it downloads vLLM 0.33.0
# and SGLang 0.5.23 with their CPU-only dependencies into benchmarks/fidelity/.engines/ (own
# virtual environments, git-ignored) and replays 2,000 trace requests through each engine at
# several budgets (tens of minutes on 2 cores). See docs/benchmarks.md, "Fidelity".
fidelity: $(STAMP_RUN)
	benchmarks/fidelity/run.sh $(abspath $(BIN)/python)

clean:
	rm -rf $(VENV) $(FAST) build src/*.egg-info .mypy_cache .pytest_cache .ruff_cache
