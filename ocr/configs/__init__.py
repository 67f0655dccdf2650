"""Hydra config groups (a package so they ship with the wheel)."""
