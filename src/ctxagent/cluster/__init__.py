"""Running sessions on more than one machine: the Temporal backend of ``ctxagent batch`` and
``ctxagent worker`` (the optional extra ``ctxagent[temporal]``; docs/batch.md, "Many machines").
Nothing here is imported by ``ctxagent --help``.
"""
