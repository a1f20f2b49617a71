"""Lessons: what one session learned, shown to the next sessions in its scope (issue 15).

- :mod:`~ctxagent.lessons.model`: the lesson (rule, evidence records, votes, computed confidence)
  and scopes (a project's repository root, a named scope, the user-wide scope).
- :mod:`~ctxagent.lessons.store`: one JSONL file per scope under ``<data dir>/lessons/``, owner-only,
  scrubbed of secrets and other users' home paths before written, locked while changed.
- :mod:`~ctxagent.lessons.extract`: deterministic rules over a transcript (no LLM) and the verdict
  of a later session on a lesson it was shown.
- :mod:`~ctxagent.lessons.curate`: merging near-duplicates, votes, eviction, deleted sessions.
- :mod:`~ctxagent.lessons.rank`: ranking for a task and the token-bounded block a session is shown.
- :mod:`~ctxagent.lessons.hooks`: the :class:`~ctxagent.lessons.hooks.Learner` the runner calls.

Depends on ``sessions``, ``tokens`` and ``profile_schema`` only; never on ``agent`` or ``cli``, and
never imports litellm.
"""
