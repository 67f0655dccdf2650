"""Framework knowledge as data for the neutral layers (no framework is imported here).

The layers below the adapters (``core`` ... ``present``) know no framework by name: a framework's
words reach them as data registered here. :func:`register_known` registers every framework grammar
the toolkit ships (Lightning's profiler action names, :mod:`.lightning_grammar`), the config
libraries whose frames are never the user's code and the Hydra app's launch facts for ``run.json``
(:mod:`.hydra_app`: ``trainperf try`` re-runs the app); ``import trainperf`` calls it, so the live
clock, ``trainperf analyze`` and :func:`trainperf.analyze_trace` read a Lightning trace without
importing Lightning. This package is adapter territory: it may name frameworks, and it imports only
the layers below it.
"""

from __future__ import annotations

from trainperf.core.actions import register_grammar, register_packages
from trainperf.records.schema import JsonValue

__all__ = ["CONFIG_PACKAGES", "register_known"]

#: Config libraries apps run their training under (their frames are not the user's code).
CONFIG_PACKAGES = ("hydra", "omegaconf")


def _hydra_launch() -> dict[str, JsonValue]:
    from trainperf.frameworks.hydra_app import launch_facts

    return launch_facts()


def register_known() -> None:
    """Register the shipped framework grammars, library packages and the Hydra app's launch
    facts for every ``run.json`` (idempotent)."""
    from trainperf.frameworks.lightning_grammar import GRAMMAR
    from trainperf.frameworks.spellings import HF, LIGHTNING, LOOP
    from trainperf.records.framework_info import register_framework
    from trainperf.records.run_info import register_facts

    for known in (LIGHTNING, LOOP, HF):  # a run.json naming only its framework reads as these
        register_framework(known)
    register_grammar(GRAMMAR)
    register_packages(CONFIG_PACKAGES)
    register_facts(_hydra_launch)
