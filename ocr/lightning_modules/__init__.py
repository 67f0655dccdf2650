"""LightningModule and callbacks (thin adapters over ocr.perf)."""
