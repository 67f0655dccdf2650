"""The command a run was started with, and a trial's command line from it.

The command a run was started with, as ``perf/run.json`` recorded it, and a trial's command
line built from it (the same interpreter, script and arguments, in the same working folder, with
the trial's output folder and one change).

A plain script (no Hydra) is re-run as it was: interpreter, its flags, the script and its
arguments, in its working folder; its changes are runtime knobs, passed in the trial window, not
on its command line. A command that cannot be re-run is refused with why (exit 2): code read from
standard input (``python -``), the interactive prompt (``python``, ``python -i``), a Jupyter /
IPython kernel, or a script that no longer exists.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from trainperf.errors import InputError
from trainperf.records.files import read_run_record
from trainperf.records.run_record import LEGACY_DROP_KEYS, LEGACY_OUTPUT_OVERRIDE, EvalCommand
from trainperf.records.schema import RunDirError

__all__ = ["RecordedCommand", "TryInputError", "override_key", "recorded_command"]


class TryInputError(InputError, ValueError):
    """The run cannot be re-run (no command recorded, its folder gone) or an option is bad."""


def override_key(override: str) -> str:
    """The config key of a Hydra override: ``+data.x=1`` -> ``data.x``; ``~a.b`` -> ``a.b``."""
    key = override.split("=", 1)[0]
    return key.lstrip("+~")


@dataclass(frozen=True)
class RecordedCommand:
    """How a run was started.

    Args:
        executable: the Python interpreter (``sys.executable``).
        launcher: the interpreter's arguments before the app's own: ``["-m", "ocr.train"]``,
            a console script's path, or a script's path.
        flags: the app's own arguments that are not overrides (``--config-name x``), in order.
        overrides: the app's config overrides (its saved overrides file when it has one), or
            its plain arguments for a script that takes none.
        takes_overrides: the app takes config overrides (a change can be one).
        module_class: the model module's class name, when recorded.
        output_override: the override that sends a trial's output to ``{dir}``.
        drop_keys: keys whose overrides (and sub-keys') a trial's command leaves out.
        evaluation: how the app evaluates a checkpoint (eval-time changes), when it recorded it.
    """

    run_dir: Path
    executable: str
    launcher: tuple[str, ...]
    flags: tuple[str, ...]
    overrides: tuple[str, ...]
    cwd: Path
    takes_overrides: bool
    module_class: str | None = None
    evaluation: EvalCommand | None = None
    output_override: str = LEGACY_OUTPUT_OVERRIDE
    drop_keys: tuple[str, ...] = LEGACY_DROP_KEYS

    def argv(
        self,
        output_dir: Path,
        changes: tuple[str, ...] = (),
        drop_keys: tuple[str, ...] = (),
        launcher: tuple[str, ...] | None = None,
    ) -> list[str]:
        """The command line of a trial writing into ``output_dir`` with ``changes`` (Hydra
        overrides; an earlier override of the same key is replaced). ``drop_keys``: overrides
        of these keys (or their sub-keys) are left out. ``launcher``: another entry point of the
        same app (its evaluation). Each argument that names the run folder (``RUN``,
        ``--out=RUN``, ``key=RUN``; relative to the run's working folder) names ``output_dir``
        instead (:meth:`redirected`): a trial never writes into the run it measures. A plain
        script: its own command line so redirected; ``changes`` and ``launcher`` are refused:
        it has no overrides."""
        if not self.takes_overrides:
            if changes or launcher is not None:
                raise TryInputError(
                    f"{self.run_dir}: its command takes no config overrides; its arguments "
                    "cannot be changed"
                )
            return [self.executable, *self.launcher, *self.redirected(output_dir)]
        replaced = {override_key(c) for c in changes}
        dropped = (*self.drop_keys, *drop_keys)

        def keeps(override: str) -> bool:
            key = override_key(override)
            if key in replaced:
                return False
            return not any(key == k or key.startswith(k + ".") for k in dropped)

        kept = [o for o in self.redirected(output_dir) if keeps(o)]
        return [
            self.executable,
            *(self.launcher if launcher is None else launcher),
            *self.flags,
            *kept,
            self.output_override.replace("{dir}", str(output_dir)),
            *changes,
        ]

    def redirected(self, output_dir: Path) -> list[str]:
        """The run's arguments (a plain script's, a Hydra app's overrides) with those naming
        the run folder naming ``output_dir``: a whole argument (``runs/plain``) or the value of
        ``--opt=`` / ``key=`` (``trainer.default_root_dir=...``), when it resolves (from the
        run's working folder) to the run folder itself. Paths inside the run folder are left
        alone (a checkpoint to resume from is an input)."""
        run = self.run_dir.resolve()
        if output_dir.resolve() == run:
            return list(self.overrides)
        out: list[str] = []
        for arg in self.overrides:
            head, sep, value = arg.rpartition("=") if "=" in arg else ("", "", arg)
            if value and (self.cwd / value).resolve() == run:
                arg = f"{head}{sep}{output_dir}"
            out.append(arg)
        return out


def _read_overrides(path: Path) -> list[str] | None:
    """``.hydra/overrides.yaml``: a YAML list of strings."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except yaml.YAMLError as exc:
        raise TryInputError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise TryInputError(f"{path}: expected a list of override strings")
    return data


# python -i, alone or among other single-letter flags that take no value (-ui)
_INTERACTIVE_FLAG = re.compile(r"-[bBdEIOPqsSuvx]*i[bBdEIOPqsSuvx]*")


def _check_rerunnable(
    root: Path, orig: list[str], script: str, launcher: list[str], cwd: Path
) -> None:
    """:class:`TryInputError` naming why a plain script's command cannot be re-run."""
    why: str | None = None
    interpreter_opts = itertools.takewhile(
        lambda a: a.startswith("-") and a not in ("-m", "-c"), launcher
    )
    if any("ipykernel" in a or a.endswith("ipython") for a in (script, *orig[:3])):
        why = "it ran in a Jupyter / IPython kernel, an interactive session"
    elif script == "-":
        why = "its code came from standard input (python -), which a re-run cannot replay"
    elif script == "":
        why = "it ran at the interactive Python prompt"
    elif any(_INTERACTIVE_FLAG.fullmatch(o) for o in interpreter_opts):
        why = "python -i opens an interactive prompt after the script, which waits for input"
    elif "-m" not in launcher and "-c" not in launcher:
        path = Path(script)
        path = path if path.is_absolute() else cwd / path
        if not path.exists():
            why = f"its script {path} no longer exists"
    if why is not None:
        raise TryInputError(
            f"{root}: the run's command ({' '.join(orig)}) cannot be re-run: {why}; run the "
            "training from a script file (python train.py ...) and record that run"
        )


def recorded_command(run_dir: str | os.PathLike[str]) -> RecordedCommand:
    """The command of the run in ``run_dir``; :class:`TryInputError` (one line, exit 2) when
    it recorded none or cannot be re-run."""
    root = Path(run_dir)
    if not root.is_dir():
        raise TryInputError(f"{root}: not a run directory (no such directory)")
    try:
        info = read_run_record(root)
    except FileNotFoundError:
        raise TryInputError(
            f"{root}: no perf/run.json, so no command to re-run (record the run with "
            "trainperf's performance monitor for its framework)"
        ) from None
    except RunDirError as exc:
        raise TryInputError(str(exc)) from exc
    executable, orig, argv = info.executable, info.orig_argv, info.argv
    if executable is None or not orig or not argv:
        raise TryInputError(
            f"{root / 'perf' / 'run.json'}: no command recorded (executable / orig_argv "
            "missing: the run was recorded by an older version); re-record it to use try"
        )
    app_args = [str(a) for a in argv[1:]]
    # orig_argv = [python, *launcher, *app_args]
    launcher = [str(a) for a in orig[1 : len(orig) - len(app_args)]]
    launch = info.launch
    launch_cwd = launch.cwd if launch is not None else None
    cwd = Path(str(launch_cwd or info.cwd or root))
    if not cwd.is_dir():
        raise TryInputError(f"{root}: the run's working folder {cwd} no longer exists")
    if launch is None:
        _check_rerunnable(root, [str(a) for a in orig], str(argv[0]), launcher, cwd)
        overrides, flags = app_args, []  # a plain script's arguments, re-run as they were
    else:
        saved = launch.overrides_file
        read = _read_overrides(root / saved) if saved else None
        overrides = read if read is not None else list(launch.overrides)
        # the app's own arguments that are not overrides (``--config-name x``), multirun left out
        flags = [
            a for a in app_args if a not in launch.multirun and (a.startswith("-") or "=" not in a)
        ]
    return RecordedCommand(
        run_dir=root,
        executable=executable,
        launcher=tuple(launcher),
        flags=tuple(flags),
        overrides=tuple(overrides),
        cwd=cwd,
        takes_overrides=launch is not None,
        module_class=info.module_class,
        evaluation=info.eval,
        output_override=launch.output_argument if launch is not None else LEGACY_OUTPUT_OVERRIDE,
        drop_keys=launch.dropped if launch is not None else LEGACY_DROP_KEYS,
    )
