"""Open a ``trainperf report`` page in headless Chromium, save a screenshot and fail on console
errors or a page without its plots and tables.

    python scripts/check_report_render.py runs/demo/perf/report.html report.png

Exit codes: 0 the page rendered (screenshot written), 1 it rendered with console errors or
without plots / tables, 2 bad input or no Chromium. Nothing is fetched from the network: the page
is self-contained and Chromium runs with networking features off and a fresh profile.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
# Chromium's own log lines for page console messages: `... CONSOLE(12)] "message", source: ...`
# (older builds) or `... CONSOLE] ...`; level ERROR / uncaught exceptions are what we refuse.
_CONSOLE = re.compile(r"CONSOLE[^\]]*\]\s*(.*)")
_ERRORISH = re.compile(r"Uncaught|Error|Refused|Failed to load|net::ERR", re.IGNORECASE)
TIMEOUT_S = 90


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium executable: ``explicit``, else the first of ``CHROMIUM_CANDIDATES`` found."""
    for name in (explicit,) if explicit else CHROMIUM_CANDIDATES:
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


def _run(chromium: str, profile: Path, extra: list[str]) -> subprocess.CompletedProcess[str]:
    cmd = [chromium, *FLAGS, f"--user-data-dir={profile}", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def console_errors(stderr: str) -> list[str]:
    """Page console messages in Chromium's log that are errors."""
    out = []
    for line in stderr.splitlines():
        m = _CONSOLE.search(line)
        if m and (":ERROR:" in line or _ERRORISH.search(m.group(1))):
            out.append(m.group(1).strip())
    return out


def check_dom(dom: str) -> list[str]:
    """What is missing from the rendered DOM: the verdict, at least one plot and one table."""
    problems = []
    if 'id="verdict"' not in dom:
        problems.append("no verdict section")
    if dom.count("<svg") < 1:
        problems.append("no inline SVG plot")
    if dom.count("<table") < 1:
        problems.append("no table")
    return problems


def check(html: Path, png: Path, chromium: str, width: int = 1280, height: int = 2400) -> list[str]:
    """Render ``html`` to ``png``; return the problems found (empty: rendered cleanly)."""
    url = html.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="report-render-") as tmp:
        profile = Path(tmp) / "profile"
        dom_run = _run(
            chromium,
            profile,
            ["--enable-logging=stderr", "--v=0", "--dump-dom", url],
        )
        shot_run = _run(
            chromium,
            Path(tmp) / "profile2",
            [f"--screenshot={png.resolve()}", f"--window-size={width},{height}", url],
        )
    problems = [f"console error: {m}" for m in console_errors(dom_run.stderr)]
    problems += check_dom(dom_run.stdout)
    if dom_run.returncode != 0:
        problems.append(f"chromium --dump-dom exited {dom_run.returncode}")
    if shot_run.returncode != 0 or not png.is_file() or png.stat().st_size == 0:
        problems.append(f"no screenshot written (chromium exited {shot_run.returncode})")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("html", type=Path, help="the report page")
    p.add_argument("png", type=Path, help="where to save the screenshot")
    p.add_argument("--chromium", help="Chromium executable (default: /usr/bin/chromium, PATH)")
    p.add_argument("--width", type=int, default=1280, help="window width in px (1280)")
    p.add_argument("--height", type=int, default=2400, help="window height in px (2400)")
    args = p.parse_args(argv)
    if not args.html.is_file():
        print(f"check_report_render: error: {args.html}: no such file", file=sys.stderr)
        return 2
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print(
            "check_report_render: error: no Chromium found (apt install chromium)", file=sys.stderr
        )
        return 2
    args.png.parent.mkdir(parents=True, exist_ok=True)
    try:
        problems = check(args.html, args.png, chromium, args.width, args.height)
    except subprocess.TimeoutExpired:
        print(
            f"check_report_render: error: chromium did not finish in {TIMEOUT_S} s", file=sys.stderr
        )
        return 1
    for problem in problems:
        print(f"check_report_render: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"rendered {args.html} -> {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
