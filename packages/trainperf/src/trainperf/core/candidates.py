"""A change that a finding proposes and ``trainperf try`` can measure.

A change that a finding proposes and ``trainperf try`` can measure (by re-running the run's own
command with it)."""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.core.knobs import Knob


@dataclass(frozen=True)
class Candidate:
    """One proposed change.

    Args:
        family: what kind of change: ``workers``, ``prefetch``, ``persistent_workers``,
            ``pin_memory``, ``cache`` (a worker-side cache), ``threads``, ``channels_last``,
            ``compile``, ``batch_size``, ``precision``, ``cudnn_benchmark``, ``fused_optimizer``,
            ``postprocess`` or ``other``.
        alters_computation: the change alters what is computed (canvas size, batch size,
            precision, postprocess limits), so a speed-up alone does not make it safe.
        eval_time: the change only affects evaluation outputs (postprocess limits); it must be
            checked on the run's checkpoint, not only timed.
        override: a Hydra override whose key exists in the run's resolved configuration, or
            ``+path=value`` adding a constructor argument to a node the configuration has (a
            ``torch.optim`` optimizer's ``fused``); ``None`` for a run not configured by a Hydra
            app or a change with no key in its config (then ``description`` says it in plain
            language).
        knob: the runtime knob (:mod:`trainperf.core.knobs`) that makes the change without a config
            key (``override`` is ``None`` then), or ``None``.
    """

    family: str
    description: str
    override: str | None = None
    alters_computation: bool = False
    eval_time: bool = False
    knob: Knob | None = None

    @property
    def change(self) -> str | None:
        """What ``trainperf try`` applies: the override, else the knob (``knob:...``)."""
        return self.override or (self.knob.text if self.knob is not None else None)
