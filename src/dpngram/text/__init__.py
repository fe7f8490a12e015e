"""Layer ``text``: text handling, independent of any engine.

``tokenizer.py`` the tokenizer; ``records.py`` raw-input parsing and quarantine reasons;
``public.py`` the public corpus and known-vocabulary readers; ``sample.py`` the synthetic sample
corpus.

Owns: tokenization, input-record parsing and quarantine, public-text readers, the sample corpus.
Imports: dpngram.config, dpngram.core.
"""
