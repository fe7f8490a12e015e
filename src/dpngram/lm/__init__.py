"""Layer ``lm``: language-model building and evaluation from released files.

Everything here is post-processing of DP outputs: ``arpa.py`` ARPA files and fractional-count
Kneser-Ney; ``open_model.py`` the open-vocabulary mixture; ``build.py`` the model from a release;
``evaluate.py`` perplexity and next-word prediction; ``model_card.py`` the model card;
``kenlm_bin.py`` KenLM's command-line tools.

Owns: language-model estimation, the ARPA format, the model card, model evaluation.
Imports: dpngram.release.layout (no other release module), dpngram.engines, dpngram.text,
dpngram.config, dpngram.core.
"""
