# Two entry points: `make demo` (main job) and `make test` (what CI runs). Both set up .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN    ?= runs/demo
export WANDB_MODE ?= offline
export PYTHONUNBUFFERED := 1

.PHONY: setup demo test lint unit clean baseline-doc gpu-check toolkit-check

setup: $(STAMP)

# torch first and pinned: an unpinned resolve would pull the multi-GB CUDA build.
$(STAMP): pyproject.toml packages/trainperf/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e "./packages/trainperf[lightning,nvml,report]"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,wandb]"
	touch $@

# The toolkit alone, as a user installs it: a fresh venv with CPU torch and only the built
# trainperf distribution with its report and hf extras (no app, no Hydra, no OpenCV, no
# Lightning): the plain-loop and Hugging Face examples run in it and `trainperf report` reads
# their folders; then the lightning extra is added and the plain Lightning script runs, with
# `trainperf report / baseline / check` (scripts/toolkit_check.py says what each stage checks);
# last the test extra joins and the toolkit's own tests (packages/trainperf/tests) run against
# the installed distribution (no source tree on sys.path; the session header names the trainperf
# under test and TRAINPERF_TESTS_INSTALLED=1 makes a source-tree import an error).
# The installs use .venv's pip and skip bytecode (the check's first imports write it); each step
# is stamped, so a rerun with nothing changed is free and a change to the toolkit's source
# reinstalls only trainperf (Lightning and the test extra's Hydra are taken out first, so the
# first stage runs without them).
TOOLKIT_VENV  := .venv-toolkit
TOOLKIT_PIP   := $(BIN)/python -m pip --python $(TOOLKIT_VENV)/bin/python
TOOLKIT_SRC   := $(shell find packages/trainperf/src/trainperf -name '*.py')
TOOLKIT_TESTS := $(shell find packages/trainperf/tests -type f -not -path '*/__pycache__/*')

toolkit-check: $(TOOLKIT_VENV)/.tested

$(TOOLKIT_VENV)/.torch: constraints.txt | $(STAMP)
	rm -rf $(TOOLKIT_VENV)
	$(PYTHON) -m venv --without-pip $(TOOLKIT_VENV)
	$(TOOLKIT_PIP) install -q --no-compile -c constraints.txt torch==2.13.0
	touch $@

# build/ is removed first: setuptools would carry a deleted module's stale copy into the wheel.
$(TOOLKIT_VENV)/.installed: $(TOOLKIT_VENV)/.torch packages/trainperf/pyproject.toml $(TOOLKIT_SRC)
	rm -rf packages/trainperf/build
	$(TOOLKIT_PIP) uninstall -q -y lightning pytorch-lightning hydra-core omegaconf
	$(TOOLKIT_PIP) install -q --no-compile -c constraints.txt "./packages/trainperf[report,hf]"
	touch $@

$(TOOLKIT_VENV)/.checked-alone: $(TOOLKIT_VENV)/.installed examples/plain_loop.py \
		examples/hf_trainer.py scripts/toolkit_check.py
	$(TOOLKIT_VENV)/bin/python scripts/toolkit_check.py --stage without-lightning
	touch $@

$(TOOLKIT_VENV)/.lightning: $(TOOLKIT_VENV)/.checked-alone
	rm -rf packages/trainperf/build
	$(TOOLKIT_PIP) install -q --no-compile -c constraints.txt "./packages/trainperf[lightning,report,hf]"
	touch $@

$(TOOLKIT_VENV)/.checked: $(TOOLKIT_VENV)/.lightning examples/plain_lightning.py scripts/toolkit_check.py
	$(TOOLKIT_VENV)/bin/python scripts/toolkit_check.py --stage with-lightning
	touch $@

$(TOOLKIT_VENV)/.tested: $(TOOLKIT_VENV)/.checked $(TOOLKIT_TESTS)
	rm -rf packages/trainperf/build
	$(TOOLKIT_PIP) install -q --no-compile -c constraints.txt "./packages/trainperf[lightning,nvml,report,hf,test]"
	env -u PYTHONPATH TRAINPERF_TESTS_INSTALLED=1 $(TOOLKIT_VENV)/bin/pytest -q -n 2 \
		--rootdir packages/trainperf -c packages/trainperf/pyproject.toml packages/trainperf/tests
	touch $@

demo: setup
	rm -rf $(RUN)
	$(BIN)/ocr-train experiment=synthetic_debug callbacks=monitoring hydra.run.dir=$(RUN)
	$(BIN)/ocr-test experiment=synthetic_debug hydra.run.dir=$(RUN)/test \
		checkpoint_path=$(RUN)/checkpoints/last.ckpt split=val
	$(BIN)/ocr-test experiment=synthetic_debug hydra.run.dir=$(RUN)/test-heldout \
		checkpoint_path=$(RUN)/checkpoints/last.ckpt split=test
	$(BIN)/trainperf report $(RUN)

# Regenerates docs/performance/baseline.md and the committed gate baseline (2-4 min; run it on
# a quiet machine).
baseline-doc: setup
	$(BIN)/python benchmarks/baseline_doc.py \
		--baseline-json tests/performance/baselines/synthetic_debug_val.json

# Every CUDA path run and timed -> docs/performance/gpu.md (without CUDA: the parts that apply,
# the skipped ones named; see `python scripts/gpu_check.py --plan`).
gpu-check: setup
	$(BIN)/python scripts/gpu_check.py

lint: setup
	$(BIN)/ruff check ocr packages tests benchmarks scripts examples
	$(BIN)/ruff format --check ocr packages tests benchmarks scripts examples
	$(BIN)/mypy
	$(BIN)/lint-imports

# Two pytest workers (pytest-xdist) on CI's two cores: much of the suite waits on subprocesses,
# DataLoader workers and planted sleeps, so the second worker fills that time. The app's tests
# (tests/, pyproject's testpaths); the toolkit's own ran in toolkit-check, in the toolkit's venv.
test: setup lint toolkit-check
	$(BIN)/pytest -q -n 2

clean:
	rm -rf $(VENV) $(TOOLKIT_VENV) runs outputs .pytest_cache .mypy_cache .ruff_cache
