"""A mistyped setting or config choice of ``ocr-train`` / ``ocr-test`` as one line and exit 2.

Hydra reports a key that is not in the config (``trainer.max_epoch=3``) in six lines ending with
the hint to append ``+trainer.max_epoch=3`` (which would add a setting nothing reads), and a
misspelt group choice (``experiment=synthetic_debgu``) with its search path; both exit 1. Here
they become one line naming the key or choice, where it was given, and the closest valid keys or
choices (``difflib``)::

    ocr-train: error: trainer.max_epoch=3 (command line): no such key; did you mean
    trainer.max_epochs?   (on one line)

:func:`config_errors` wraps the ``@hydra.main`` function; it has Hydra raise its composition
errors instead of printing them (``HYDRA_FULL_ERROR``) until the task function calls
:func:`composed`, after which every other error is reported as before. The user's own
``HYDRA_FULL_ERROR=1`` keeps Hydra's full error. Nothing is written: composition fails before
Hydra makes the run folder. Meanwhile :func:`trainperf.cli.errors.full_error_requested` answers as
the user set it (the Hydra callbacks that refuse a checkpoint or a run folder ask it).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainperf.cli import errors as cli_errors
from trainperf.errors import ConfigError

from ocr.cli_errors import EXIT_BAD_INPUT, full_error_requested, report_error  # registers Hydra's

if TYPE_CHECKING:
    from trainperf.recording.profiler_settings import FlatSetting

__all__ = ["composed", "config_errors", "describe", "flat_twin_conflict", "moved_to"]

_FULL_ERROR = "HYDRA_FULL_ERROR"


def composed() -> None:
    """The config composed: errors from here on are reported as without :func:`config_errors`
    (call first thing in the task function)."""
    if cli_errors.full_error_set_by_us:
        os.environ.pop(_FULL_ERROR, None)
        cli_errors.full_error_set_by_us = False


def _flat_keys(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            name = f"{prefix}{key}"
            yield name
            yield from _flat_keys(value, f"{name}.")


def _valid_keys(config_name: str, overrides: list[str]) -> list[str]:
    """Every dotted key of the config composed with ``overrides`` (without them when they do
    not compose either)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    for attempt in (overrides, []):
        try:
            with initialize_config_module("ocr.configs", version_base="1.3"):
                cfg = compose(config_name=config_name, overrides=attempt)
            return list(_flat_keys(OmegaConf.to_container(cfg, resolve=False)))
        except Exception:
            continue
    return []


def _groups() -> list[str]:
    """The config groups (``experiment``, ``trainer``, ...): the folders of ``ocr/configs``."""
    root = Path(__file__).parent / "configs"
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def _closest(word: str, candidates: list[str]) -> str:
    """``; did you mean X?`` with the closest candidate (and any as close), or nothing."""
    scored = sorted(
        ((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in set(candidates)),
        reverse=True,
    )
    if not scored or scored[0][0] < 0.6:
        return ""
    best = scored[0][0]
    close = [c for ratio, c in scored[:3] if ratio >= best - 0.02]
    return f"; did you mean {' or '.join(close)}?"


def moved_to(key: str, valid: list[str]) -> str:
    """``; it moved to X`` when ``key``'s last name is a key ``X`` of the same config entry one
    level up or down (``callbacks.profiler.active`` -> ``callbacks.profiler.schedule.active``,
    ``callbacks.profiler.trace.warmup`` -> ``callbacks.profiler.schedule.warmup``), naming the
    grouped setting too when ``X`` is one of the original project's flat profiler arguments
    (``callbacks.profiler.schedule.profile_steps`` -> ``callbacks.profiler.profile_steps``, i.e.
    ``callbacks.profiler.schedule.active``); empty when there is no such key, when the key's
    parent is not a node of the config (a misspelling on the way) or when more than two keys
    share the name. A spelling distance would rather suggest a different setting with a
    similar name."""
    from trainperf.recording.profiler_settings import FLAT_SETTINGS

    parts = key.split(".")
    parent = ".".join(parts[:-1])
    if parent and parent not in valid:
        return ""  # a misspelt node on the way (rules.hangg.enabled): not a move
    entry = min(len(parts) - 1, 2)  # the entry (``callbacks.profiler``, ``model``) must match
    depth = len(parts)
    found = []
    for other in valid:
        names = other.split(".")
        if names[-1] != parts[-1] or names[:entry] != parts[:entry] or other == key:
            continue
        if abs(len(names) - depth) <= 1:
            found.append(other)
    if not found or len(found) > 2:
        return ""  # none, or a name many settings share (enabled): not one place it moved to
    twins = {s.flat: s.grouped for s in FLAT_SETTINGS}
    shown = []
    for other in sorted(found, key=len):
        prefix, _, name = other.rpartition(".")
        twin = f"{prefix}.{twins[name]}" if name in twins else None
        shown.append(f"{other} (= {twin})" if twin in valid else other)
    return f"; it moved to {' or '.join(shown)}"


def flat_twin_conflict(argv: list[str]) -> ConfigError | None:
    """The error for a command line that gives one of the original project's flat profiler keys
    (``callbacks.profiler.profile_steps=50``) and its grouped twin
    (``callbacks.profiler.schedule.active=10``) different values, naming both; None when it
    does not. Values are compared as the callback reads them (``[2,1]`` = ``[1,2]``). Twins set
    apart in config files are refused by the callback itself (:func:`~trainperf.lightning.
    profiler_settings.apply_flat`)."""
    from trainperf.recording.profiler_settings import FLAT_SETTINGS

    given = {}
    for arg in argv:
        name, sep, value = arg.partition("=")
        if sep and not arg.startswith("-"):
            given[name.lstrip("+~")] = value
    twins = {s.flat: s for s in FLAT_SETTINGS}
    for key, value in given.items():
        prefix, _, name = key.rpartition(".")
        setting = twins.get(name)
        twin = f"{prefix}.{setting.grouped}" if setting is not None else ""
        if setting is None or twin not in given:
            continue
        if _as_read(setting, value) != _as_read(setting, given[twin]):
            return ConfigError(
                f"{key}={value} and {twin}={given[twin]} (command line) disagree ({name} is the "
                f"flat name of {setting.grouped}); give only one of them"
            )
    return None


def _as_read(setting: FlatSetting, text: str) -> object:
    """A command-line value as the profiler's settings read it (the text when it does not
    parse: then the callback reports it)."""
    import yaml

    try:
        return setting.read(yaml.safe_load(text))
    except Exception:
        return text


def _given(argv: list[str], key: str, value: str | None = None) -> tuple[str, str]:
    """The (last) override of ``key`` (with ``value``) on the command line and where it was
    given."""
    for arg in reversed(argv):
        name, _, given = arg.partition("=")
        if name.lstrip("+~") == key and value in (None, given):
            return arg, "command line"
    return key if value is None else f"{key}={value}", "a config file"


def describe(exc: BaseException, config_name: str, argv: list[str]) -> str | None:
    """The one-line message for a Hydra composition error, or ``None`` when it is not a
    mistyped key or choice (then Hydra's own report stands)."""
    from hydra.errors import ConfigCompositionException, MissingConfigException

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file:
        group, _, choice = exc.missing_cfg_file.rpartition("/")
        if not group:
            return None
        options = [str(o) for o in exc.options or []]
        given, where = _given(argv, group, choice)
        if where != "command line":
            parent = re.match(r"In '([^']+)'", str(exc))
            where = f"defaults of {parent.group(1)}.yaml" if parent else where
        listed = f" (choices: {', '.join(options)})" if options else ""
        return (
            f"{given} ({where}): no {group} config named {choice!r}"
            f"{_closest(choice, options)}{listed}"
        )
    if isinstance(exc, ConfigCompositionException):
        bad = re.match(r"Could not override '([^']+)'", str(exc))
        if bad is None:
            return None
        key = bad.group(1)
        given, where = _given(argv, key)
        others = [a for a in argv if "=" in a and a != given and not a.startswith("-")]
        valid = _valid_keys(config_name, others)
        hint = (
            moved_to(key, valid)
            or _closest(key, [*valid, *_groups()])
            or " (ocr-train --cfg job shows the keys)"
        )
        return f"{given} ({where}): no such key{hint}"
    return None


@contextmanager
def config_errors(prog: str, config_name: str) -> Iterator[None]:
    """Around the ``@hydra.main`` call: a mistyped key or config choice becomes one line on
    stderr and ``SystemExit(2)`` (see the module doc)."""
    conflict = flat_twin_conflict(sys.argv[1:])
    if conflict is not None:  # before Hydra makes the run folder
        report_error(prog, conflict)
        raise SystemExit(EXIT_BAD_INPUT)
    user_full = full_error_requested()
    if not user_full:
        os.environ[_FULL_ERROR] = "1"
        cli_errors.full_error_set_by_us = True
    try:
        yield
    except Exception as exc:
        if user_full or not cli_errors.full_error_set_by_us:
            raise  # the user's HYDRA_FULL_ERROR, or reported by Hydra already
        composed()
        message = describe(exc, config_name, sys.argv[1:])
        if message is not None:
            report_error(prog, message)
            raise SystemExit(EXIT_BAD_INPUT) from None
        _hydra_report(exc)
        raise SystemExit(1) from None
    finally:
        composed()


def _hydra_report(exc: Exception) -> None:
    """What Hydra prints for an error before the task function (its ``run_and_report``): the
    message of its own compact errors, else the traceback."""
    import traceback

    from hydra.errors import CompactHydraException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, CompactHydraException):
        sys.stderr.write(f"{exc}{os.linesep}")
        if isinstance(exc.__cause__, OmegaConfBaseException):
            sys.stderr.write(f"{exc.__cause__}{os.linesep}")
    else:
        traceback.print_exception(exc)
