# Two commands for newcomers: `make demo` and `make test`. Both create or reuse .venv and install first.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.strandline-installed
# The CPU wheel of torch; override on a GPU machine, e.g. `make test TORCH_SPEC="torch==2.13.0 --index-url ..."`
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= train,dev,bigwig,bench,variants,pdf

.PHONY: install test test-all demo lint bench bench-deps clean

$(STAMP): pyproject.toml
	@test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q -e ".[$(EXTRAS)]"
	@touch $(STAMP)

install: $(STAMP)

test: install
	$(PY) -m pytest -q

test-all: install
	$(PY) -m pytest -q -m ""

demo: install
	$(VENV)/bin/strandline demo

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# The paper's kernels as a benchmark peer; nvcc is kept off PATH so that only the CPU extension is built.
bench-deps: install
	env PATH=/usr/bin:/bin $(PIP) install --no-build-isolation pytorch-fast-transformers

bench: install
	$(PY) benchmarks/attention.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
