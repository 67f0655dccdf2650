"""The bottom layer: vocabularies, clock, statistics and findings, without torch.

The bottom layer: the phase clock, statistics and significance, the stage, action and phase
vocabularies, findings and their thresholds, candidate changes and runtime knobs. Imports neither
torch nor rich."""
