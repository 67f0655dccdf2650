"""Candidates for ``trainperf try``, from ``--candidate`` options and the verdict's findings.

An option is ``--candidate KEY=VALUE``; from the findings come the candidates of the highest-scoring
ones (:data:`TOP_FINDINGS`).

The family and the labels of an explicit override are inferred from the key's leaf name, since
that is all a command-line override says: ``batch_size``, ``precision``, a canvas / image size and
``postprocess.*`` alter what is computed; ``postprocess.*`` is evaluation-time (checked on the
checkpoint, not timed in training). Unknown keys are family ``other``, not altering computation.
A ``knob:NAME=VALUE`` value is a runtime knob (:mod:`trainperf.core.knobs`): its family and labels
come from the knob table. A knob the run's framework cannot apply (``FrameworkInfo.cannot_try``,
recorded by its adapter) is refused before any trial, with the adapter's reason
(:func:`applicable`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainperf.core.candidates import Candidate
from trainperf.core.findings import Finding, rank
from trainperf.core.knobs import Knob, is_knob
from trainperf.records.command import TryInputError, override_key
from trainperf.records.framework_info import FrameworkInfo

__all__ = [
    "TOP_FINDINGS",
    "Refused",
    "applicable",
    "candidates_from_findings",
    "parse_candidate",
    "unique_candidates",
]

# leaf name of the key -> family
_FAMILIES: dict[str, str] = {
    "num_workers": "workers",
    "workers": "workers",
    "prefetch_factor": "prefetch",
    "persistent_workers": "persistent_workers",
    "pin_memory": "pin_memory",
    "torch_threads": "threads",
    "num_threads": "threads",
    "channels_last": "channels_last",
    "compile": "compile",
    "batch_size": "batch_size",
    "precision": "precision",
    "benchmark": "cudnn_benchmark",
    "cudnn_benchmark": "cudnn_benchmark",
    "fused": "fused_optimizer",
}
# leaf names that change what is computed, not only how fast
_ALTERS = frozenset({"batch_size", "precision", "canvas_size", "image_size", "img_size", "size"})


def parse_candidate(text: str) -> Candidate:
    """A ``--candidate`` value (a Hydra override ``key=value`` or a knob ``knob:NAME=VALUE``) as
    a :class:`Candidate`; :class:`TryInputError` (or :class:`~trainperf.core.knobs.KnobError`)
    naming the value when it is not one."""
    if is_knob(text):
        knob = Knob.parse(text)
        spec = knob.spec
        return Candidate(
            family=spec.family,
            description=f"{spec.meaning}: {knob.setting}",
            alters_computation=spec.alters_computation,
            knob=knob,
        )
    key, sep, value = text.partition("=")
    key = override_key(key + "=")
    if not sep or not key or not value.strip() or any(c.isspace() for c in key):
        raise TryInputError(
            f"--candidate {text!r}: expected a Hydra override KEY=VALUE or a knob knob:NAME=VALUE"
        )
    leaf = key.rsplit(".", 1)[-1]
    parts = key.split(".")
    eval_time = "postprocess" in parts
    family = "postprocess" if eval_time else _FAMILIES.get(leaf, "other")
    if family == "other" and any("cache" in part for part in parts):
        family = "cache"
    alters = eval_time or leaf in _ALTERS
    return Candidate(
        family=family,
        description=f"set {key} to {value}",
        override=text,
        alters_computation=alters,
        eval_time=eval_time,
    )


#: How many findings (those with candidates, in the verdict's order) ``trainperf try`` takes its
#: changes from: the causes whose change could recover the most; the rest wait for a later
#: session.
TOP_FINDINGS = 3


def candidates_from_findings(findings: Iterable[Finding]) -> list[Candidate]:
    """The candidates of the first :data:`TOP_FINDINGS` findings that carry any, in the
    verdict's order (:func:`~trainperf.core.findings.rank`: what their change could recover)."""
    proposing = [f for f in rank(findings) if f.candidates]
    return [c for finding in proposing[:TOP_FINDINGS] for c in finding.candidates]


def unique_candidates(candidates: Sequence[Candidate]) -> list[Candidate]:
    """First of each change (override or knob; a plain-language one by its description)."""
    first: dict[str, Candidate] = {}
    for c in candidates:
        first.setdefault(c.change or f"text:{c.description}", c)
    return list(first.values())


@dataclass(frozen=True)
class Refused:
    """A candidate ``trainperf try`` cannot apply to the run's framework, and why (its
    adapter's words)."""

    candidate: Candidate
    framework: str
    reason: str

    @property
    def line(self) -> str:
        """``cannot try knob:... on this hf run (what it changes): why``."""
        what = self.candidate.change or self.candidate.description
        return (
            f"cannot try {what} on this {self.framework} run "
            f"({self.candidate.description}): {self.reason}"
        )


def applicable(
    candidates: Sequence[Candidate], framework: FrameworkInfo | None
) -> tuple[list[Candidate], list[Refused]]:
    """``candidates`` split into those ``try`` can apply to a run of ``framework`` and those it
    cannot: a runtime knob (no config override) whose family the framework's adapter refuses
    (``cannot_try``). An override is the app's own config key and applies wherever the command
    re-runs; an unknown framework (an older folder: Lightning's) refuses nothing."""
    if framework is None or not framework.cannot_try:
        return list(candidates), []
    kept: list[Candidate] = []
    refused: list[Refused] = []
    for c in candidates:
        reason = framework.cannot_try.get(c.family) if c.override is None else None
        if reason is not None and c.knob is not None:
            refused.append(Refused(c, framework.name, reason))
        else:
            kept.append(c)
    return kept, refused
