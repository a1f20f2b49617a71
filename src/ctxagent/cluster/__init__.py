"""Running sessions on more than one machine: the Temporal backend of ``ctxagent batch`` and
``ctxagent worker`` (issue 14, part 3; the optional extra ``ctxagent[temporal]``).

- :mod:`.temporal_workflow`: the workflow (one per task, its id the session name) and the shape of
  its input; imports nothing but the standard library and ``temporalio``.
- :mod:`.temporal_activity`: the one coarse activity, a ``ctxagent run`` process per session.
- :mod:`.temporal_worker`: ``ctxagent worker --backend temporal``.
- :mod:`.temporal_submit`: ``ctxagent batch --backend temporal``.
- :mod:`.guard`: stops a session's process when its worker dies.

Nothing here is imported by ``ctxagent --help``.
"""
