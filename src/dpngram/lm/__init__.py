"""Layer ``lm``: language-model building and evaluation from released files.

Everything here is post-processing of DP outputs, one module per step: ``ngram_tables.py`` the
in-memory backoff model (its tables and row structure); ``kneser_ney.py`` fractional-count
Kneser-Ney; ``open_model.py`` the public model P and the noisy-count model Q; ``mixture.py`` P
adapted to Q's unigrams, their union and mixture; ``arpa_file.py`` the ARPA rules, writer and
reader; ``build.py`` the model from a release; ``evaluate.py`` perplexity and next-word
prediction; ``model_card.py`` the model card; ``kenlm_bin.py`` KenLM's command-line tools.

Owns: language-model estimation, the ARPA format, the model card, model evaluation.
Imports: dpngram.release.layout, dpngram.release.identity (only ``public_cache_dir``; no other
release module: pyproject's forbidden contract), dpngram.engines, dpngram.text, dpngram.config,
dpngram.core.
"""
