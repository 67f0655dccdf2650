"""LightningModule and callbacks (thin adapters over trainperf)."""
