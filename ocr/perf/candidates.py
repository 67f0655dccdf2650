"""A change that a finding proposes and ``ocr-perf try`` can measure.

The verdict's findings carry candidates; ``ocr-perf try`` re-runs the run's own command with each
candidate's override and measures it. A candidate's ``override`` is a Hydra override whose key
exists in the run's resolved configuration; a run not configured by a Hydra app (or a change
with no key in its config) gets a plain-language ``description`` only, which ``try`` cannot apply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """One proposed change (``override``: module docstring).

    Args:
        family: what kind of change: ``workers``, ``prefetch``, ``persistent_workers``,
            ``pin_memory``, ``polygon_cache``, ``threads``, ``channels_last``, ``compile``,
            ``batch_size``, ``precision``, ``cudnn_benchmark``, ``postprocess`` or ``other``.
        alters_computation: the change alters what is computed (canvas size, batch size,
            precision, postprocess limits), so a speed-up alone does not make it safe.
        eval_time: the change only affects evaluation outputs (postprocess limits); it must be
            checked on the run's checkpoint, not only timed.
    """

    family: str
    description: str
    override: str | None = None
    alters_computation: bool = False
    eval_time: bool = False
