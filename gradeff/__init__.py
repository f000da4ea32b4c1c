"""gradeff: which optimizer and which memory strategy for your model on your hardware."""

__version__ = "0.1.0"
