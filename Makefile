# Thin wrappers; .ci/run calls `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Pinned: an unpinned torch pulls a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := podman docker-registry slurm-wlm munge mmdebstrap
# The transformers the model server's vLLM release resolves to (VLLM_TRANSFORMERS in
# skills/model_server/kubernetes/settings.py), kept apart from ours for the test that
# it loads the trainer's export (tests/trainer/test_export_for_vllm.py).
VLLM_TF := $(VENV)/vllm-transformers
VLLM_TF_PINS := transformers==5.22.2 huggingface_hub>=2.0.0 jinja2  # jinja2: chat templates

.PHONY: setup setup-dev system-deps demo test bench lint clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.trainer: pyproject.toml | $(PY)
	$(PY) -m pip install -q "$(TORCH)" -e ".[trainer]"
	touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.trainer $(VLLM_TF)/.installed
	$(PY) -m pip install -q "$(TORCH)" -e ".[trainer,float8,wandb,dev]"
	touch $@

$(VLLM_TF)/.installed: Makefile | $(PY)
	rm -rf $(VLLM_TF)
	$(PY) -m pip install -q --target $(VLLM_TF) $(VLLM_TF_PINS)
	touch $@

setup: $(VENV)/.trainer

setup-dev: $(VENV)/.dev

# The local test services that pytest starts (tests/services/): podman's Docker API,
# Debian's docker-registry, a one-node Slurm (slurm-wlm + munge), and mmdebstrap for the
# stand-in of the trainer image's base (built once per machine, tests/services/standin_base.py);
# node and npm for the TypeScript SDK client test (its npm packages: test_ts_client.py).
system-deps:
	@missing=""; for bin in podman docker-registry sbatch slurmctld slurmd munged mmdebstrap; do \
	  command -v $$bin >/dev/null 2>&1 || [ -x /usr/bin/$$bin ] || [ -x /usr/sbin/$$bin ] || missing="$$missing $$bin"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "installing nodejs npm"; $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm >/dev/null; }

demo: setup
	$(PY) commands/deploy_training_job.py --target local --job_name demo

# One worker per core (pytest-xdist, a file per worker at a time; see tests/conftest.py).
# Exit 5 is "no tests collected" (a selection that matched none), not a failure.
TEST_WORKERS ?= auto

test: system-deps setup-dev
	$(PY) -m pytest -n $(TEST_WORKERS) || [ $$? -eq 5 ]

# Every benchmark in benchmarks/ (bare_*.py are the baselines they run, _*.py helpers), each
# to its ratios; one that fails does not stop the rest, and `make bench` fails at the end.
# BENCH_ARGS=--quick runs each one's quick mode (smallest size, once: what the tests run).
BENCHMARKS := $(sort $(filter-out benchmarks/bare_% benchmarks/_%,$(wildcard benchmarks/*.py)))

bench: system-deps setup-dev
	@failed=""; for b in $(BENCHMARKS); do echo "== $$b $(BENCH_ARGS)"; \
	  $(PY) $$b $(BENCH_ARGS) || failed="$$failed $$b"; done; \
	if [ -n "$$failed" ]; then echo "benchmarks that failed:$$failed"; exit 1; fi

PRODUCT := skills trainer mcp_server commands

lint: setup-dev
	$(PY) -m ruff check .
	$(PY) -m ruff format --check $(PRODUCT)
	@! grep -rn --include='*.py' 'fmt: skip\|fmt: off' $(PRODUCT) || \
		{ echo 'the formatter wins in product code: no fmt: skip/off (issue 50)'; exit 1; }
	$(PY) -m tests.import_placement
	$(VENV)/bin/lint-imports
	$(PY) -m basedpyright --pythonpath $(PY)

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
