# h5sidecar developer commands.  `make demo` and `make test` work on a fresh machine with only
# Python 3.11+ and pip: they create .venv and install what they need.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# xdist workers: the tests wait on servers and child processes about half the time, so three
# keep two cores busy (four duplicate more per-worker setup than they gain)
WORKERS ?= 3

.PHONY: setup setup-all demo test test-upstream lint bench docs docs-setup clean

# The demo needs only the package itself; the tests need every extra and test tool.
$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[test]"
	touch $@ $(VENV)/.installed-base

setup: $(VENV)/.installed

demo: $(VENV)/.installed-base
	$(VENV)/bin/h5sidecar demo demo-output

test: setup
	bash scripts/ensure-test-tools.sh
	$(PY) -m ruff check h5sidecar tests benchmarks
	$(PY) -m mypy h5sidecar
	$(PY) -m pytest -n $(WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

# The newest releases of the libraries whose private APIs h5sidecar/_compat uses, in a venv of
# their own, against the tests of those uses and of the readers (README: Quick start).
UPSTREAM ?= .venv-upstream
test-upstream:
	python3 -m venv $(UPSTREAM)
	$(UPSTREAM)/bin/python -m pip install -q --upgrade pip
	$(UPSTREAM)/bin/python -m pip install -q --upgrade -e ".[test]" xarray zarr s3fs fsspec h5py h5netcdf
	$(UPSTREAM)/bin/python -m pip list 2>/dev/null | grep -iE '^(xarray|zarr|s3fs|fsspec|h5py|h5netcdf) '
	$(UPSTREAM)/bin/python -m pytest -n 2 --dist loadgroup -p no:cacheprovider \
		tests/test_compat.py tests/read tests/references tests/test_reader_matrix.py $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/): warnings are errors, as on Read the Docs.
$(VENV)/.installed-docs: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[docs]"
	touch $@

docs-setup: $(VENV)/.installed-docs

# The test and docs extras in one pip run (what CI needs: one resolution, not two)
$(VENV)/.installed-all: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[test,docs]"
	touch $@ $(VENV)/.installed $(VENV)/.installed-base $(VENV)/.installed-docs

setup-all: $(VENV)/.installed-all

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

lint: setup
	$(PY) -m ruff check h5sidecar tests benchmarks
	$(PY) -m mypy h5sidecar

bench: setup
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(UPSTREAM) demo-output .pytest_cache site
