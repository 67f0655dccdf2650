"""Runtime knobs: changes ``trainperf try`` can make to a run it did not configure.

A config app's candidate is an override of its own config key; a plain script has no such key,
and even a config app may lack one (``torch.compile``). A *knob* is a change a framework adapter
applies itself at the start of a trial (inside ``TRAINPERF_TRY_WINDOW``, set only by ``trainperf
try``), through public APIs. This module (no framework) holds the table of knobs (:data:`KNOBS`),
their parsing and, in neutral words, how to make each change in one's own code; the run's own
framework's words for it come from what its adapter recorded (:func:`apply_lines`' ``spell``).

Namespace: ``knob:NAME=VALUE`` (``--candidate knob:dataloader.num_workers=4``). A config
override's grammar refuses a ``:`` in a key, so a knob can never be read as an override, nor an
override as a knob. Knob names are a command-line surface: ``trainer.precision`` keeps its name
(the run's mixed-precision setting, whatever its framework calls it).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from trainperf.errors import InputError

__all__ = [
    "KNOBS",
    "KNOB_PREFIX",
    "Knob",
    "KnobError",
    "KnobSpec",
    "apply_lines",
    "family_knob",
    "has_knob",
    "is_knob",
    "knobs_of",
]

#: How a knob is written where a config override could be (``--candidate``).
KNOB_PREFIX = "knob:"

KnobValue = int | bool | str

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class KnobError(InputError, ValueError):
    """A knob's name or value is not one ``trainperf try`` knows; the message names both."""


@dataclass(frozen=True)
class KnobSpec:
    """One knob.

    Args:
        name: its name after ``knob:`` (``dataloader.num_workers``).
        kind: ``int``, ``bool``, ``choice`` (one of ``choices``) or ``compile`` (``true``, or a
            ``torch.compile`` backend name).
        family: the candidate family it belongs to (:class:`trainperf.core.candidates.Candidate`).
        target: what it changes: ``torch`` (process-wide settings), ``model`` (the model
            module), ``optimizer`` (the optimizer the run built), ``loader`` (the training
            DataLoader) or ``trainer`` (the framework's run settings).
        meaning: what it does, for ``--help`` and the README.
        code: the change in one's own code, ``{value}`` being the value as a Python literal;
            for ``loader`` knobs the keyword argument of ``DataLoader(...)``.
        minimum: smallest value of an ``int`` knob.
        choices: the values of a ``choice`` knob.
        alters_computation: the change alters what is computed (batch size, precision).
    """

    name: str
    kind: str
    family: str
    target: str
    meaning: str
    code: str
    minimum: int = 0
    choices: tuple[str, ...] = ()
    alters_computation: bool = False

    @property
    def placeholder(self) -> str:
        """The values it takes, for help texts: ``N``, ``true|false``, ``high|medium``."""
        if self.kind == "choice":
            return "|".join(self.choices)
        return {"int": "N", "bool": "true|false"}.get(self.kind, "true|BACKEND")

    def parse_value(self, text: str) -> KnobValue:
        """``text`` as this knob's value; :class:`KnobError` naming the knob and the value."""
        raw = text.strip()
        low = raw.lower()
        if self.kind == "int":
            with contextlib.suppress(ValueError):
                if int(raw) >= self.minimum:
                    return int(raw)
            raise KnobError(
                f"knob {self.name}: expected an integer >= {self.minimum}, got {text!r}"
            )
        if self.kind == "bool":
            if low in _TRUE | _FALSE:
                return low in _TRUE
            raise KnobError(f"knob {self.name}: expected true or false, got {text!r}")
        if self.kind == "choice":
            if raw not in self.choices:
                raise KnobError(
                    f"knob {self.name}: expected one of {', '.join(self.choices)}, got {text!r}"
                )
            return raw
        # compile: true (torch's default backend) or a backend's name
        if low in _TRUE:
            return True
        if low in _FALSE or not _NAME.match(raw):
            raise KnobError(
                f"knob {self.name}: expected true or a torch.compile backend name (inductor, "
                f"eager, aot_eager, ...), got {text!r}"
            )
        return raw


def _literal(value: KnobValue) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _shown(value: KnobValue) -> str:
    """The value as ``trainperf try`` reads it back (``true`` / ``false`` for a bool)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


#: Every knob, by name.
KNOBS: dict[str, KnobSpec] = {
    spec.name: spec
    for spec in (
        KnobSpec(
            "torch.threads",
            "int",
            "threads",
            "torch",
            "torch's intra-op compute threads (torch.set_num_threads)",
            "torch.set_num_threads({value})  # at start-up",
            minimum=1,
        ),
        KnobSpec(
            "torch.matmul_precision",
            "choice",
            "matmul_precision",
            "torch",
            "float32 matmul precision (torch.set_float32_matmul_precision): TF32 / bf16 passes",
            "torch.set_float32_matmul_precision({value})  # at start-up",
            choices=("highest", "high", "medium"),
            alters_computation=True,
        ),
        KnobSpec(
            "cudnn.benchmark",
            "bool",
            "cudnn_benchmark",
            "torch",
            "cuDNN's autotuner picks the fastest convolution algorithms (fixed input shapes)",
            "torch.backends.cudnn.benchmark = {value}  # at start-up",
        ),
        KnobSpec(
            "model.channels_last",
            "bool",
            "channels_last",
            "model",
            "the model module's 4-D parameters in channels-last memory format",
            "model = model.to(memory_format=torch.channels_last)  # before training",
        ),
        KnobSpec(
            "model.compile",
            "compile",
            "compile",
            "model",
            "torch.compile the model module's forward (true: torch's default backend, or a "
            "backend name); only calls through self(...) / forward are compiled",
            "model = torch.compile(model{backend})  # before training",
        ),
        KnobSpec(
            "optimizer.fused",
            "bool",
            "fused_optimizer",
            "optimizer",
            "the run's Adam / AdamW / SGD steps fused (one kernel for all parameters, no "
            "per-parameter host loop; torch >= 2.4, CUDA or CPU)",
            "torch.optim.AdamW(..., fused={value})  # where the optimizer is built (Adam, SGD "
            "alike)",
        ),
        KnobSpec(
            "dataloader.num_workers",
            "int",
            "workers",
            "loader",
            "the training DataLoader's worker processes",
            "num_workers={value}",
        ),
        KnobSpec(
            "dataloader.persistent_workers",
            "bool",
            "persistent_workers",
            "loader",
            "keep the training DataLoader's workers alive between epochs (needs workers)",
            "persistent_workers={value}",
        ),
        KnobSpec(
            "dataloader.pin_memory",
            "bool",
            "pin_memory",
            "loader",
            "the training DataLoader copies batches into pinned memory (faster host-to-GPU)",
            "pin_memory={value}",
        ),
        KnobSpec(
            "dataloader.prefetch_factor",
            "int",
            "prefetch",
            "loader",
            "batches each worker of the training DataLoader keeps in flight (needs workers)",
            "prefetch_factor={value}",
            minimum=1,
        ),
        KnobSpec(
            "dataloader.batch_size",
            "int",
            "batch_size",
            "loader",
            "the training DataLoader's batch size (changes the optimisation: scale the "
            "learning rate)",
            "batch_size={value}",
            minimum=1,
            alters_computation=True,
        ),
        KnobSpec(
            "trainer.precision",
            "choice",
            "precision",
            "trainer",
            "the run's mixed precision (swapped at the start where the framework's adapter "
            "can; see its documentation)",
            "mixed precision {value}, as the run's framework sets it",
            choices=("32-true", "16-mixed", "bf16-mixed"),
            alters_computation=True,
        ),
    )
}

# candidate family -> knob (a finding's plain-language change that try can make itself)
_BY_FAMILY: dict[str, str] = {spec.family: spec.name for spec in KNOBS.values()}


def is_knob(text: str) -> bool:
    """Whether ``text`` is written in the knob namespace (``knob:...``)."""
    return text.strip().startswith(KNOB_PREFIX)


@dataclass(frozen=True)
class Knob:
    """One knob (``name``: a key of :data:`KNOBS`) set to one value, parsed per its kind."""

    name: str
    value: KnobValue

    @property
    def spec(self) -> KnobSpec:
        return KNOBS[self.name]

    @property
    def setting(self) -> str:
        """``name=value`` (values as ``trainperf try`` reads them back)."""
        return f"{self.name}={_shown(self.value)}"

    @property
    def text(self) -> str:
        """The knob as written on the command line: ``knob:name=value``."""
        return KNOB_PREFIX + self.setting

    def code(self) -> str:
        """The change in one's own code (one knob; loader knobs: the keyword argument)."""
        template = self.spec.code
        if self.spec.kind == "compile":
            backend = "" if self.value is True else f", backend={_literal(self.value)}"
            return template.format(backend=backend)
        return template.format(value=_literal(self.value))

    @classmethod
    def parse_setting(cls, text: str) -> Knob:
        """``name=value`` (no prefix) as a knob; :class:`KnobError` naming what is wrong."""
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or not value.strip():
            raise KnobError(f"knob {text!r}: expected NAME=VALUE")
        spec = KNOBS.get(name)
        if spec is None:
            raise KnobError(
                f"knob {name!r} is not known; the knobs are: {', '.join(sorted(KNOBS))}"
            )
        return cls(name, spec.parse_value(value))

    @classmethod
    def parse(cls, text: str) -> Knob:
        """``knob:name=value`` as a knob; :class:`KnobError` naming what is wrong."""
        stripped = text.strip()
        if not stripped.startswith(KNOB_PREFIX):
            raise KnobError(f"{text!r} is not a knob (knobs are written {KNOB_PREFIX}NAME=VALUE)")
        return cls.parse_setting(stripped[len(KNOB_PREFIX) :])


def has_knob(family: str) -> bool:
    """Whether a runtime knob makes changes of the candidate ``family``."""
    return family in _BY_FAMILY


def family_knob(family: str, value: KnobValue) -> Knob | None:
    """The knob that makes a candidate family's change with ``value``, or ``None`` when no knob
    can (the change needs the app's own code: a target cache, postprocess limits) or the value
    is not one the knob takes."""
    name = _BY_FAMILY.get(family)
    if name is None:
        return None
    try:
        return Knob.parse_setting(f"{name}={_shown(value)}")
    except KnobError:
        return None


_CALL = re.compile(r"^([\w.]+)\((.+)\)$")


def _merged_calls(lines: Sequence[str]) -> list[str]:
    """Spelled changes with those that are keyword arguments of one call merged:
    ``Trainer(precision="bf16-mixed")`` and ``Trainer(benchmark=True)`` ->
    ``Trainer(precision="bf16-mixed", benchmark=True)``; others as they are, once each."""
    out: list[str] = []
    calls: dict[str, int] = {}
    for line in dict.fromkeys(lines):
        m = _CALL.match(line)
        if m is None or "=" not in m.group(2):
            out.append(line)
        elif m.group(1) in calls:
            i = calls[m.group(1)]
            out[i] = f"{out[i][:-1]}, {m.group(2)})"
        else:
            calls[m.group(1)] = len(out)
            out.append(line)
    return out


def apply_lines(
    knobs: Iterable[Knob], spell: Callable[[str, KnobValue], str | None] | None = None
) -> list[str]:
    """How to make ``knobs`` in one's own code, one line per place: the training DataLoader's
    keyword arguments together (``DataLoader(..., num_workers=4, persistent_workers=True)``),
    each other change in the run's framework's words where ``spell`` (candidate family, value
    -> its spelling) has them (one call's arguments together), then the rest in neutral words.
    A loader knob the framework spells as something other than the DataLoader's own argument
    (``TrainingArguments(dataloader_num_workers=4)``) is written its way."""
    spelled: list[str] = []
    loader: list[str] = []
    other: list[str] = []
    for knob in knobs:
        words = spell(knob.spec.family, knob.value) if spell is not None else None
        if knob.spec.target == "loader" and (words is None or words.startswith("DataLoader(")):
            loader.append(knob.code())
        elif words is not None:
            spelled.append(words)
        else:
            other.append(knob.code())
    out = [f"DataLoader(..., {', '.join(loader)})  # the training loader"] if loader else []
    return out + _merged_calls(spelled) + other


def knobs_of(changes: Sequence[str]) -> tuple[Knob, ...]:
    """The knobs among ``changes`` (knob texts and Hydra overrides mixed)."""
    return tuple(Knob.parse(c) for c in changes if is_knob(c))
