"""Hydra config groups (a package so they ship with the wheel), plus the nodes derived from code.

``trainer/lightning`` holds every ``lightning.Trainer.__init__`` argument with Lightning's own
default, read from the installed Lightning's signature, so ``trainer.<any argument>=...`` composes
(``trainer.fast_dev_run=true``) while a misspelled key is still refused by Hydra's struct mode
(``trainer.max_epoch=3``: "Key 'max_epoch' is not in struct"). ``trainer/default.yaml`` layers our
choices on top of it. Importing this package registers the node (idempotent): the entry points do
it through :func:`ocr.runtime.register_resolvers`, and ``initialize_config_module("ocr.configs")``
does it by importing the package.

``alert_rules/default`` holds every alert rule of the catalogue
(``trainperf.alerts.catalogue``) with every setting and its default, so
``callbacks/resource_monitor.yaml`` repeats none of them while
``callbacks.resource_monitor.rules.hang.enabled=false`` still composes and a misspelled rule or
setting is still refused.
"""

from __future__ import annotations

import inspect
from typing import Any

from hydra.core.config_store import ConfigStore
from trainperf.alerts.catalogue import rule_defaults

TRAINER_TARGET = "lightning.pytorch.Trainer"


def trainer_arguments() -> dict[str, Any]:
    """``{name: default}`` of every keyword argument of ``lightning.Trainer.__init__``."""
    import lightning as L

    out: dict[str, Any] = {}
    for name, param in inspect.signature(L.Trainer.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = None if param.default is inspect.Parameter.empty else param.default
        # Every default is a plain value in Lightning 2.x; anything else (a future object
        # default) is left to Lightning by passing null, which the Trainer treats as "not set".
        out[name] = default if isinstance(default, str | int | float | bool | None) else None
    return out


def register_trainer_defaults() -> None:
    """Store ``trainer/lightning``: ``_target_`` plus :func:`trainer_arguments`."""
    node = {"_target_": TRAINER_TARGET, **trainer_arguments()}
    ConfigStore.instance().store(group="trainer", name="lightning", node=node)


def register_alert_rules() -> None:
    """Store ``alert_rules/default``: rule name -> its settings with their defaults."""
    ConfigStore.instance().store(group="alert_rules", name="default", node=rule_defaults())


register_trainer_defaults()
register_alert_rules()
