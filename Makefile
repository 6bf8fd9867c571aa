# One-command set-up on a fresh machine: a virtualenv in .venv with everything the project needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: demo test test-kafka test-unit test-fallback typecheck bench chaos install ext docs clean spark-kafka-jars
SEEDS ?= 0-9
BROKER ?= embedded

# `pip install -e .` also compiles the optional C speed-ups in place
# (setuptools' editable mode runs build_ext inplace); a failed compile leaves
# the pure-Python hashes in use and does not fail the install.
$(VENV)/.base: setup.cfg setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e '.[kafka-python,broker]'
	touch $@

$(VENV)/.full: $(VENV)/.base
	$(PY) -m pip install --quiet -e '.[kafka-python,broker,spark,test]'
	touch $@

install: $(VENV)/.full

# The docs extra (Sphinx, MyST) on top of everything autodoc imports (Spark,
# kafka-python, prometheus_client); kept out of the test extra CI installs.
$(VENV)/.docs: $(VENV)/.full
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $@

## make ext: (re)build the optional C speed-ups in place after editing kafka_ordered/_speedups.c
ext: $(VENV)/.base
	$(PY) setup.py --quiet build_ext --inplace
	$(PY) -c 'import kafka_ordered; print("C speed-ups enabled:", kafka_ordered.speedups_enabled())'

## make spark-kafka-jars: Spark's own Kafka connector (spark-sql-kafka-0-10 and what it needs) into
## ~/.m2 with Maven; the Spark tests and benchmarks that compare with it skip or say MISSING without it
spark-kafka-jars: $(VENV)/.base
	$(PY) -c 'from kafka_ordered.testing import fetch_builtin_kafka_jars as f; print("\n".join(f()))'

## make demo: start an embedded broker and run ordered vs plain clients through 4->5->6->8->6->8
demo: $(VENV)/.base
	$(VENV)/bin/kafka-ordered demo

## make test: the whole suite (unit, integration on an embedded broker, Spark, fixed chaos seeds) on the
## C speed-ups; then the unit tests and the end-to-end ordering scenarios again on their pure-Python
## fallback (the whole suite there: make test-fallback); then the integration tests, the Spark tests
## whose subject is the broker (pipeline, sink, ordering, SASL_SSL, parity with Spark's own connector)
## and the chaos seeds on a 3-node Apache Kafka cluster (kafka_ordered.testing.KafkaCluster; its jars
## come from Maven Central on first use; every Spark test there: make test-kafka). Each pass lists its
## 25 slowest tests. The cuts keep a clean-clone run under an hour.
FALLBACK_TESTS ?= tests/unit tests/integration/test_ordering_scenarios.py
KAFKA_CI_TESTS ?= tests/integration tests/spark/test_pipeline.py tests/spark/test_sink.py \
	tests/spark/test_ordering.py tests/spark/test_secured.py tests/spark/test_builtin_parity.py tests/chaos
# Also left to make test-kafka: the harness's node life cycle (85 s; the cluster-operation tests and the
# chaos seeds there stop, kill and restart nodes too) and seed 8's plain control (seed 39's stays)
KAFKA_CI_CUTS ?= --deselect tests/integration/test_kafka_cluster.py::test_life_cycle_of_a_node \
	--deselect "tests/chaos/test_chaos.py::test_plain_clients_break_order_under_the_same_faults[8]"
test: $(VENV)/.full spark-kafka-jars
	$(PY) -m pytest --durations=25 $(PYTEST_ARGS)
	KAFKA_ORDERED_NO_SPEEDUPS=1 $(PY) -m pytest --durations=25 $(FALLBACK_TESTS) $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-kafka KAFKA_TESTS="$(KAFKA_CI_TESTS)" \
		PYTEST_ARGS='--durations=25 $(KAFKA_CI_CUTS) $(PYTEST_ARGS)'

## make test-kafka: the integration, Spark and fixed chaos tests on a 3-node Apache Kafka KRaft cluster
## (the unit tests need no broker; KAFKA_TESTS=... narrows it)
KAFKA_TESTS ?= tests/integration tests/spark tests/chaos
test-kafka: $(VENV)/.full spark-kafka-jars
	KAFKA_ORDERED_BROKER=kafka $(PY) -m pytest $(KAFKA_TESTS) $(PYTEST_ARGS)

## make chaos SEEDS=0-49 [BROKER=kafka]: the randomized multi-process fault suite, one line per seed
## and a total; BROKER=kafka runs it on a 3-node Apache Kafka cluster with broker faults added, then
## the long forms of the Spark pipeline (5 rounds of resizes and restarts) and of the exactly-once
## pipeline (5 rounds of resizes, aborts and SIGKILLs; it needs Apache Kafka)
EOS_ROUNDS ?= 5
PIPELINE_ROUNDS ?= 5
chaos: $(VENV)/.full spark-kafka-jars
	$(PY) -m tests.chaos.run --seeds $(SEEDS) --broker $(BROKER)
	$(PY) -m tests.chaos.run --seeds $(firstword $(subst -, ,$(SEEDS))) --plain --broker $(BROKER)
	SPARK_LOCAL_IP=127.0.0.1 KAFKA_ORDERED_BROKER=$(BROKER) KAFKA_ORDERED_PIPELINE_ROUNDS=$(PIPELINE_ROUNDS) \
		$(PY) -m pytest -q -rs tests/spark/test_pipeline.py -k keeps_every_key
	KAFKA_ORDERED_BROKER=$(BROKER) KAFKA_ORDERED_EOS_ROUNDS=$(EOS_ROUNDS) \
		$(PY) -m pytest -q -rs tests/integration/test_exactly_once.py -k ordered

test-unit: $(VENV)/.full
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

## make test-fallback: the whole suite on the pure-Python fallback (C speed-ups off)
test-fallback: $(VENV)/.full
	KAFKA_ORDERED_NO_SPEEDUPS=1 $(PY) -m pytest $(PYTEST_ARGS)

typecheck: $(VENV)/.full
	$(PY) -m pip install --quiet 'mypy>=1.10'
	$(PY) -m mypy kafka_ordered --ignore-missing-imports

## make docs: the API reference (autodoc, from the docstrings) and the guides into docs/_build/html;
## any Sphinx warning fails the build
docs: $(VENV)/.docs
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

## make bench [BROKER=kafka]: every benchmark (paired rounds against the raw clients), then a summary
## table of their BENCH lines (BENCH_ARGS=--markdown for the README's table); BROKER=kafka runs
## them on a 3-node Apache Kafka cluster
BENCH_ARGS ?=
bench: $(VENV)/.full spark-kafka-jars
	SPARK_LOCAL_IP=127.0.0.1 $(PY) benchmarks/_summary.py --broker $(BROKER) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info docs/_build kafka_ordered/_speedups*.so kafka_ordered/_speedups*.pyd .pytest_cache .hypothesis spark-warehouse
