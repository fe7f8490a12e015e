"""Layer ``mechanisms``: the DP algorithms, with explicit parameters.

DPSU (``dpsu.py``), DPNE (``dpne.py``), BayesianDP (``bayes.py``), Chen et al.'s variable-length
n-grams (``synth.py``), TrieHH (``triehh.py``) and the noisy language-model counts
(``lm_counts.py``): numbers, an ``Engine`` and a schema name, a ``NoiseSource`` in; released
keys/values and ``PrivacyEvent`` s out. No ``RunContext``, no ledger: only a stage charges the
budget. A sibling of ``dpngram.validation`` (neither imports the other).

Owns: the DP algorithms and their sensitivity and calibration arguments.
Imports: dpngram.lm, dpngram.release.layout (no other release module), dpngram.engines,
dpngram.text, dpngram.core; never dpngram.config (a stage turns the configuration into explicit
parameters; import-linter checks it).
"""
