"""receipt-ocr: DBNet receipt text detection with a performance toolkit."""

__version__ = "0.1.0"
