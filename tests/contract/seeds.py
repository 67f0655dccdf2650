"""The original project's documents (``../shared/seeds/*.txt``) and the usages they show, each
quoted with its file and section: the contract tests of ``test_seed_usages.py`` exercise these
quotes as written. ``test_every_quote_stands_in_its_seed`` checks each quote against its seed
where the seeds are beside the checkout, so a quote cannot drift from the document it cites."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SEEDS = Path(os.environ.get("OCR_SHARED_SEEDS", REPO_ROOT.parent / "shared" / "seeds"))


@dataclass(frozen=True)
class Usage:
    """One documented usage: the seed file (by its number prefix), its section and the text
    quoted from it (whitespace as in the seed)."""

    seed: str
    section: str
    quote: str

    def path(self) -> Path | None:
        """The seed file, or None when the seeds are not beside this checkout."""
        found = sorted(SEEDS.glob(f"{self.seed}_*.txt")) if SEEDS.is_dir() else []
        return found[0] if found else None


USAGES: dict[str, Usage] = {
    "000-import-train": Usage(
        "000",
        "Usage / In Training Code",
        """from ocr.lightning_modules.callbacks import PerformanceProfilerCallback

profiler = PerformanceProfilerCallback(
    enabled=True,
    log_interval=10,
    profile_memory=True,
    verbose=True,  # Set to False in production
)""",
    ),
    "000-yaml": Usage(
        "000",
        "Deliverables / 2. Configuration (configs/callbacks/performance_profiler.yaml)",
        """performance_profiler:
  _target_: ocr.lightning_modules.callbacks.PerformanceProfilerCallback
  enabled: true
  log_interval: 10  # Log every 10 batches
  profile_memory: true
  verbose: false""",
    ),
    "000-hydra": Usage(
        "000",
        "Usage / Via Hydra Config",
        """uv run python runners/train.py preset=example \\
  callbacks=performance_profiler \\
  callbacks.performance_profiler.verbose=true""",
    ),
    "000-wandb-keys": Usage(
        "000",
        "Usage / View Metrics in WandB",
        """- `performance/val_epoch_time` - Total validation time per epoch
- `performance/val_batch_mean` - Average batch time
- `performance/val_batch_median` - Median batch time
- `performance/val_batch_p95` - 95th percentile batch time
- `performance/val_batch_p99` - 99th percentile batch time
- `performance/gpu_memory_gb` - GPU memory usage
- `performance/cpu_memory_percent` - CPU memory usage""",
    ),
    "000-import-test": Usage(
        "000",
        "Validation Results / Import test",
        'uv run python -c "from ocr.lightning_modules.callbacks import '
        'PerformanceProfilerCallback"',
    ),
    "000-test-command": Usage(
        "000",
        "Next Steps / Commands to Execute",
        """uv run python runners/test.py preset=example \\
  checkpoint_path="outputs/ocr_training/checkpoints/best.ckpt" \\
  callbacks=performance_profiler \\
  callbacks.performance_profiler.verbose=true \\
  wandb=true \\
  experiment_tag=baseline_profiling""",
    ),
    "001-keys": Usage(
        "001",
        "Implementation Details / Class Structure (on_validation_epoch_end)",
        """            "performance/val_batch_std": float(np.std(batch_times)),
            "performance/val_num_batches": len(batch_times),""",
    ),
    "001-module": Usage(
        "001",
        "Implementation Details / Integration Pattern",
        "from ocr.lightning_modules.callbacks.performance_profiler import "
        "PerformanceProfilerCallback",
    ),
    "001-instantiate": Usage(
        "001",
        "Validation / Expected Behavior",
        "Callback can be instantiated: `PerformanceProfilerCallback(enabled=True)`",
    ),
    "001-disabled": Usage(
        "001",
        "Implementation Details / Edge Cases to Handle",
        "4. **Callback disabled** - minimal overhead, early return",
    ),
    "003-class": Usage(
        "003",
        "Implementation Requirements / 1. Create `ProfilerCallback` (ocr/callbacks/profiler.py)",
        """        enabled: bool = True,
        profile_epochs: list[int] | None = None,  # Which epochs to profile
        profile_steps: int = 100,  # Steps to profile per epoch
        warmup_steps: int = 5,
        activities: list[str] | None = None,  # ["cpu", "cuda"]
        record_shapes: bool = True,
        with_stack: bool = False,  # Stack traces (slow but detailed)
        output_dir: str = "profiler_traces",
        export_chrome_trace: bool = True,
        log_top_k_ops: int = 10,  # Top-k slowest operations""",
    ),
    "003-package": Usage(
        "003",
        "4. Integration Points / In `callbacks/__init__.py`",
        "from ocr.callbacks.profiler import ProfilerCallback",
    ),
    "003-yaml": Usage(
        "003",
        "4. Integration Points / Config File: `configs/callbacks/profiler.yaml`",
        """profiler:
  _target_: ocr.callbacks.profiler.ProfilerCallback
  enabled: false  # Disabled by default (performance overhead)
  profile_epochs: [1, 5, 10]  # Profile epochs 1, 5, and 10
  profile_steps: 100
  warmup_steps: 5
  activities: ["cpu", "cuda"]
  record_shapes: true
  with_stack: false  # Enable for detailed traces (slower)
  output_dir: "profiler_traces"
  export_chrome_trace: true
  log_top_k_ops: 15""",
    ),
    "003-analyze": Usage(
        "003",
        "3. Bottleneck Detection",
        """def analyze_trace(self, trace_path: str) -> dict:
    \"\"\"
    Analyze Chrome trace file to identify bottlenecks.

    Returns:
        {
            "top_cpu_ops": [(op_name, time_us), ...],
            "top_cuda_ops": [(op_name, time_us), ...],
            "memory_peaks": [(time, bytes), ...],
            "dataloader_time_pct": float,
        }""",
    ),
    "003-integration": Usage(
        "003",
        "Testing Requirements / Integration Test",
        """python ocr/train.py \\
    experiment=synthetic_debug \\
    trainer.max_epochs=3 \\
    callbacks.profiler.enabled=true \\
    callbacks.profiler.profile_epochs=[1,2] \\
    callbacks.profiler.profile_steps=50""",
    ),
    "003-usage": Usage(
        "003",
        "4. Integration Points / Usage in training",
        """python ocr/train.py \\
    experiment=synthetic_debug \\
    callbacks.profiler.enabled=true \\
    callbacks.profiler.profile_epochs=[1,2]""",
    ),
    "003-quick": Usage(
        "003",
        "Quick Test Commands",
        """python ocr/train.py \\
    experiment=synthetic_debug \\
    trainer.max_epochs=1 \\
    callbacks.profiler.enabled=true \\
    callbacks.profiler.profile_steps=20""",
    ),
    "003-default-off": Usage(
        "003",
        "Important Notes / Performance Overhead",
        "Default to `enabled=false` to avoid surprise slowdowns",
    ),
    "004-modules": Usage(
        "004",
        "Phase 3 Tasks / Files to Create",
        """- `ocr/lightning_modules/callbacks/throughput_monitor.py`
- `configs/callbacks/throughput_monitor.yaml`""",
    ),
    "004-profiler-module": Usage(
        "004",
        "Task 3.2: PyTorch Profiler Integration / Files to Create",
        """- `ocr/lightning_modules/callbacks/profiler_callback.py`
- `configs/callbacks/profiler.yaml`""",
    ),
    "004-resource-module": Usage(
        "004",
        "Task 3.3: Resource Monitoring / Files to Create",
        """- `ocr/lightning_modules/callbacks/resource_monitor.py`
- `configs/callbacks/resource_monitor.yaml`""",
    ),
    "004-pattern": Usage(
        "004",
        "Essential Files / Reference Code",
        "[PerformanceProfilerCallback](ocr/lightning_modules/callbacks/performance_profiler.py)",
    ),
}
