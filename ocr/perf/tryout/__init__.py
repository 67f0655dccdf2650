"""``ocr-perf try``: measure a run's candidate changes by re-running its own command.

command (the recorded command and a trial's command line), candidate_options (``--candidate``
text and findings -> ``Candidate``), paired (when a change is recommended; the statistics are
:mod:`ocr.perf.significance`), trial (one trial subprocess and its speed from its perf files),
session (interleaving, budget, eval-time candidates checked with ``ocr-test`` on the run's
checkpoint, winners together; ``perf/try.jsonl``), show (progress and the table), cli (the
command).
"""
