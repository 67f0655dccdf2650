"""``ocr-perf try``: measure a run's candidate changes by re-running its own command.

command (the recorded command and a trial's command line), candidate_options (``--candidate``
text and findings -> ``Candidate``), measure (a trial's speed from its perf files), paired
(when a change is recommended; the statistics are :mod:`ocr.perf.significance`), trial (one
trial subprocess), results (``perf/try.jsonl``), session (interleaving, budget, eval-time
candidates checked with ``ocr-test`` on the run's checkpoint, winners together), show (progress
and the table), cli (the command).
"""
