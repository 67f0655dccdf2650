"""``trainperf try``: measure a run's candidate changes by re-running its own command in trials.

cli (the command), candidate_options (``--candidate`` text and findings -> ``Candidate``),
session (interleaving, budget, eval-time candidates checked with the app's evaluation command on
the run's checkpoint, when a change is recommended, winners together; ``perf/try.jsonl``), arms (a
change under measurement and the record it ends as), trial_process (one trial subprocess and its
speed from its perf files), run_guard (trial folders outside the run, the run checked after each
trial). The recorded command is :mod:`trainperf.records.command`; progress and the table,
:mod:`trainperf.present.trial_table`.
"""
