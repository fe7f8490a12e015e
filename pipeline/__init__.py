"""dpngram: differentially private n-grams and language models from private user text."""

__version__ = "0.1.0"
