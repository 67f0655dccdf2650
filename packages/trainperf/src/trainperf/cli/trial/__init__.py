"""``trainperf try``: measure a run's candidate changes by re-running its own command.

command (the recorded command and a trial's command line), candidate_options (``--candidate``
text and findings -> ``Candidate``), trial (one trial subprocess and its speed from its perf
files), session (interleaving, budget, eval-time candidates checked with the app's evaluation
command on the run's checkpoint, when a change is recommended, winners together;
``perf/try.jsonl``), show (progress and the table), cli (the command).
"""
