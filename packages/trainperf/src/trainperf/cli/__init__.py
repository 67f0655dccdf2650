"""The ``trainperf`` command: analyze, compare, baseline, check, report, try, watch."""
