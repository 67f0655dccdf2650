"""``model.compile``: ``torch.compile`` of the detector network, off by default.

The one seam between the app and ``torch.compile``. :func:`compile_settings` reads the two Hydra
keys (``model.compile``, ``model.compile_mode``) into a :class:`CompileSettings` when the module is
built, so a bad value is one :class:`~ocr.errors.ConfigError` naming the key before anything
trains; :func:`compile_network` compiles the network in place (``nn.Module.compile``: the
parameters, their names and the checkpoint keys stay the module's own, no ``_orig_mod.`` prefix)
when the module is set up. Training, validation, test and predict all call the network, so all
run compiled.

Dynamo traces on the first call and on each new input shape (its recompiles are what
``trainperf.probe.recompiles`` counts per epoch; ``callbacks.epoch_scan`` records them). The
default backend (``inductor``) needs a C++ compiler on CPU and Triton on CUDA; ``eager`` traces
and guards without generating code (what the CPU tests use).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ocr.errors import ConfigError

#: ``torch.compile``'s backend when ``model.compile=true``.
DEFAULT_BACKEND = "inductor"
#: ``model.compile_mode`` values (inductor's modes in torch 2.13; ``None`` = torch's default).
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class CompileSettings:
    """How the network is compiled: ``backend`` ``None`` means not at all (eager)."""

    backend: str | None = None
    mode: str | None = None

    @property
    def enabled(self) -> bool:
        return self.backend is not None

    def describe(self) -> str:
        """``"eager (not compiled)"`` or ``"torch.compile (backend inductor, mode default)"``."""
        if self.backend is None:
            return "eager (not compiled)"
        return f"torch.compile (backend {self.backend}, mode {self.mode or 'default'})"


def compile_settings(value: bool | str | None, mode: str | None = None) -> CompileSettings:
    """:class:`CompileSettings` of the ``model.compile`` / ``model.compile_mode`` values:
    ``value`` (``model.compile``) is ``false`` / ``null`` (eager), ``true``
    (:data:`DEFAULT_BACKEND`) or a backend
    name torch knows here; ``mode`` one of :data:`MODES`, inductor only. Anything else is a
    :class:`ConfigError` naming the key and the value."""
    if value is None or value is False:
        if mode is not None:
            raise ConfigError(
                f"model.compile_mode={mode!r} is set but model.compile is {value!r}: set "
                "model.compile=true to compile, or drop the mode"
            )
        return CompileSettings()
    if value is True:
        backend = DEFAULT_BACKEND
    elif isinstance(value, str) and value.strip():
        backend = value.strip()
    else:
        raise ConfigError(
            f"model.compile must be true, false or a torch.compile backend name, got {value!r}"
        )
    known = torch.compiler.list_backends(exclude_tags=())
    if backend not in known:
        raise ConfigError(
            f"model.compile={backend!r}: torch.compile has no backend of that name here "
            f"(it has {', '.join(known)})"
        )
    if mode is not None:
        if mode not in MODES:
            raise ConfigError(f"model.compile_mode must be one of {', '.join(MODES)}; got {mode!r}")
        if backend != "inductor":
            raise ConfigError(
                f"model.compile_mode={mode!r} is a mode of the inductor backend, but "
                f"model.compile={backend!r}: use model.compile=true (inductor) or drop the mode"
            )
    return CompileSettings(backend=backend, mode=mode)


def is_compiled(net: torch.nn.Module) -> bool:
    """Whether ``net`` was compiled in place (``nn.Module.compile``)."""
    return getattr(net, "_compiled_call_impl", None) is not None


def compile_network(net: torch.nn.Module, settings: CompileSettings) -> bool:
    """Compile ``net`` in place as ``settings`` says; ``True`` when it was compiled now (not when
    it is eager by the settings, or was compiled already: set-up runs once per stage)."""
    if not settings.enabled or is_compiled(net):
        return False
    net.compile(backend=settings.backend, mode=settings.mode)
    return True
