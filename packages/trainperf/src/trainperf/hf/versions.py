"""The ``transformers`` releases the Trainer adapter was tested with.

The ``transformers`` releases :class:`~trainperf.hf.callback.PerfCallback` was tested with: its
phase split relies on the order of the ``TrainerCallback`` events inside ``Trainer.train`` (the
batches of one optimizer step fetched before ``on_step_begin``, ``on_pre_optimizer_step`` /
``on_optimizer_step`` around ``optimizer.step()``, logging / evaluation / saving after
``on_step_end``), which a release may change. Outside the range it still records, and says so
once."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

__all__ = ["TESTED_VERSIONS", "check_versions"]

#: Package -> [lowest, first untested) release, tested with
#: ``packages/trainperf/tests/integration/test_hf_*``:
#: transformers 5.24.0 with accelerate 1.15.0 and torch 2.13 (CPU), 2026-11-28.
TESTED_VERSIONS: dict[str, tuple[str, str]] = {
    "transformers": ("5.24.0", "5.25.0"),
}


def check_versions(versions: dict[str, str] | None = None) -> str | None:
    """None when ``transformers`` is in :data:`TESTED_VERSIONS`, else why not (one line).
    ``versions`` overrides the installed versions (tests)."""
    if versions is None:
        import transformers

        versions = {"transformers": str(transformers.__version__)}
    for package, (low, high) in TESTED_VERSIONS.items():
        raw = versions.get(package)
        if raw is None:
            continue
        try:
            version = Version(Version(raw).base_version)  # 5.24.0rc1 -> 5.24.0
        except InvalidVersion:
            return f"{package} {raw!r} is not a version trainperf.hf can compare"
        if not Version(low) <= version < Version(high):
            return (
                f"{package} {raw} is outside the range trainperf.hf was tested with "
                f"({low} <= version < {high}); it still records, but its phase split relies on "
                "the order of the Trainer's callback events, which this release may have changed"
            )
    return None
