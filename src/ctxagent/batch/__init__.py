"""``ctxagent batch``'s machinery: many sessions from one tasks file, idempotent and resumable.

- :mod:`ctxagent.batch.tasks` — the tasks file, each task's ``ctxagent`` command line, and how its
  session stands (answered: reported; started: resumed). The Temporal backend (ctxagent/cluster/) shares it.
- :mod:`ctxagent.batch.pool` — N tasks at a time on this machine, each its own process; the tally.
- :mod:`ctxagent.batch.forkserver` — how a task process starts: forked from a ``multiprocessing``
  fork server that imported ctxagent once, or a new ``python -m ctxagent`` process.
- :mod:`ctxagent.batch.preload` (and :mod:`~ctxagent.batch.preload_litellm`) — imported by the fork
  server only, for what their import does.

The command itself (options, progress, summary, exit status) is ``ctxagent/cli/batch.py``.

This file imports nothing: the fork server imports it before :mod:`ctxagent.batch.preload`, whose
set-up must come before any import that takes time.
"""
