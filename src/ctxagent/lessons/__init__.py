"""Lessons: what one session learned, shown to the next sessions in its scope (issue 15; docs/lessons.md).

The runner calls :class:`~ctxagent.lessons.hooks.Learner`. Depends on ``sessions``, ``tokens`` and
``profile_schema`` only; never on ``agent`` or ``cli``, and never imports litellm.
"""
