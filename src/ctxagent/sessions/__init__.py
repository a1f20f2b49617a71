"""Sessions: the JSONL transcript (``transcript``, ``records``), the output store of offloaded
outputs (``store``), locks and listing (``session``).

Nothing is re-exported here, so importing one submodule does not import the others (pydantic,
which ``records`` needs, costs start-up time that ``ctxagent --help`` must not pay).
"""
