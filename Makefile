# One-command set-up on a fresh machine: a virtualenv in .venv with everything the project needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: demo test test-unit typecheck bench chaos install clean
SEEDS ?= 0-9

$(VENV)/.base: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e '.[kafka-python,broker]'
	touch $@

$(VENV)/.full: $(VENV)/.base
	$(PY) -m pip install --quiet -e '.[kafka-python,broker,spark,test]'
	touch $@

install: $(VENV)/.full

## make demo: start an embedded broker and run ordered vs plain clients through 4->5->6->8->6->8
demo: $(VENV)/.base
	$(VENV)/bin/kafka-ordered demo

## make test: the whole suite (unit, integration on an embedded broker, Spark)
test: $(VENV)/.full
	$(PY) -m pytest $(PYTEST_ARGS)

## make chaos SEEDS=0-49: the randomized multi-process fault suite, one line per seed and a total
chaos: $(VENV)/.full
	$(PY) -m tests.chaos.run --seeds $(SEEDS)
	$(PY) -m tests.chaos.run --seeds $(firstword $(subst -, ,$(SEEDS))) --plain

test-unit: $(VENV)/.full
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

typecheck: $(VENV)/.full
	$(PY) -m pip install --quiet 'mypy>=1.10'
	$(PY) -m mypy kafka_ordered --ignore-missing-imports

## make bench: every benchmark (prints BENCH lines)
bench: $(VENV)/.full
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis spark-warehouse
