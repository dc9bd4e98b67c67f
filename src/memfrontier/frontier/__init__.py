"""The frontier: every strategy configuration on the same questions, one ledger each, and the
quality-cost-latency frontier with bootstrap intervals (:mod:`.spec` the configurations,
:mod:`.stats` the intervals and Pareto set, :mod:`.report` the tables and plots, :mod:`.run` the
resumable runner)."""
