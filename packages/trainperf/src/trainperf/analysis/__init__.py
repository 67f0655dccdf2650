"""The analysis layer: run folders and traces in, typed results out.

Files in, typed results out: the loaded run, the trace analyzer, the verdict, the gate and
its baselines, advice. No printing, no live state."""
