"""lightning_modules."""
