"""DBNet detector, DB loss and postprocess."""
