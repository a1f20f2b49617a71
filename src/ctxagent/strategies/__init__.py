"""Strategies: pure transforms of the view (``base``), registered by name (``registry``), run as
per-path pipelines (``pipeline``).

Nothing is re-exported here: importing ``strategies.base`` must not import every strategy.
"""
