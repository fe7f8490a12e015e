"""Layer ``release``: a run's staged release and its privacy bookkeeping.

``layout.py`` one constant per released path and the staged ``Release``; ``context.py``
``RunContext``, report parts, public summaries; ``spend.py`` ``spend_once``; ``ledger.py`` the
privacy ledger; ``publish.py`` ``prepare``, ``publish_run``, asset metadata. Mechanisms and ``lm``
may use ``layout`` only.

Owns: the release layout, the run context, the one way to charge the budget, the ledger, publishing.
Imports: dpngram.engines, dpngram.text, dpngram.config, dpngram.core.
"""
