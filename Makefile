# Two entry points: `make demo` (main job) and `make test` (what CI runs). Both set up .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN    ?= runs/demo
export WANDB_MODE ?= offline
export PYTHONUNBUFFERED := 1

.PHONY: setup demo test lint unit clean baseline-doc gpu-check

setup: $(STAMP)

# torch first and pinned: an unpinned resolve would pull the multi-GB CUDA build.
$(STAMP): pyproject.toml packages/trainperf/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e "./packages/trainperf[lightning,nvml,report]"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,wandb]"
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
	$(BIN)/ruff check ocr packages tests benchmarks scripts
	$(BIN)/ruff format --check ocr packages tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

test: setup lint
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV) runs outputs .pytest_cache .mypy_cache .ruff_cache
