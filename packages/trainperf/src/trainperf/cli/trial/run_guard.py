"""What keeps ``trainperf try`` out of the run it measures.

It says where the trials' folders go, and checks after every trial that nothing in the run folder
changed.

Each trial writes into a folder of its own (``trainperf.cli.trial.trial_process``): our callbacks
read it from the trial window, a plain script's argument naming the run folder names the trial's,
and Lightning's default root folder is the trial's. A script can still write into the run folder by
a path no trial can redirect (a ``default_root_dir`` or a logger's ``save_dir`` written into the
script, a file it saves itself). :class:`RunSnapshot` notices: the run folder's every path, with
each file's size and modification time, taken before the first trial and compared after each;
any change stops the session with :class:`TrialTouchedRunError`, naming the paths, instead of
measuring on (and reporting on) a run it corrupts.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trainperf.records.command import TryInputError

__all__ = ["RunSnapshot", "TrialTouchedRunError", "trial_work_dir"]

# How many changed paths the error names.
_NAMED = 6


class TrialTouchedRunError(TryInputError):
    """A trial changed the run folder it measures; the message names the paths and why."""


@dataclass(frozen=True)
class RunSnapshot:
    """The run folder's paths (relative, ``/``-separated): each file's ``(size, mtime_ns)``,
    ``None`` for a folder."""

    root: Path
    entries: dict[str, tuple[int, int] | None]

    @classmethod
    def take(cls, root: Path) -> RunSnapshot:
        """The snapshot of ``root`` now (links are not followed; a path that vanishes while it
        is read is left out)."""
        entries: dict[str, tuple[int, int] | None] = {}
        for folder, dirs, files in os.walk(root):
            base = Path(folder)
            for name in dirs + files:
                path = base / name
                try:
                    st = path.lstat()
                except FileNotFoundError:
                    continue
                rel = path.relative_to(root).as_posix()
                entries[rel] = None if name in dirs else (st.st_size, st.st_mtime_ns)
        return cls(root, entries)

    def changes(self, later: RunSnapshot) -> list[str]:
        """What differs in ``later``: ``new: P``, ``removed: P``, ``changed: P (size a -> b)``,
        sorted by path."""
        out: list[tuple[str, str]] = []
        for rel, now in later.entries.items():
            if rel not in self.entries:
                out.append((rel, f"new: {rel}"))
            elif now != self.entries[rel]:
                was = self.entries[rel]
                sizes = f" (size {was[0]} -> {now[0]} bytes)" if was and now else ""
                out.append((rel, f"changed: {rel}{sizes}"))
        out.extend((rel, f"removed: {rel}") for rel in self.entries if rel not in later.entries)
        return [text for _, text in sorted(out)]

    def check(self, trial: str) -> None:
        """:class:`TrialTouchedRunError` when the run folder differs from this snapshot now;
        ``trial`` says which trial ran last."""
        changed = self.changes(RunSnapshot.take(self.root))
        if not changed:
            return
        named = "; ".join(changed[:_NAMED])
        more = f"; and {len(changed) - _NAMED} more" if len(changed) > _NAMED else ""
        raise TrialTouchedRunError(
            f"{self.root}: trial {trial} changed the run folder it measures ({named}{more}), "
            "so `trainperf try` stopped and recorded nothing. Its trials write into their own "
            "folders through our callbacks, the script's argument that names the run folder, "
            "and Lightning's default root folder; this script writes into the run folder by "
            "another path (a default_root_dir or a logger's save_dir written into the script, or "
            "a file it saves itself). Pass the output folder on the script's command line "
            "(python train.py RUN) and record the run again, or stop the run's own writers when "
            "TRAINPERF_TRY_WINDOW is set. (If the run is still training, wait until it ends.)"
        )


def trial_work_dir(run_dir: Path, given: Path | None) -> Path:
    """A new folder for one session's trials: under ``given`` (``--trial-dir``; made if
    missing), else under the system's temporary folder. Neither may lie inside the run folder:
    :class:`~trainperf.records.command.TryInputError`."""
    parent = given if given is not None else Path(tempfile.gettempdir())
    run = run_dir.resolve()
    where = parent.resolve()
    if where == run or run in where.parents:
        what = f"--trial-dir {given}" if given is not None else f"the temporary folder {parent}"
        raise TryInputError(
            f"{what} lies inside the run folder {run_dir}: the trials must not write into the "
            "run they measure; name a folder outside it with --trial-dir"
        )
    try:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="trainperf-try-", dir=parent))
    except OSError as exc:
        raise TryInputError(f"--trial-dir {parent}: cannot make a folder there ({exc})") from exc
