"""Preloaded by the fork server of ``ctxagent batch`` (batch/forkserver.py) after batch/preload.py
when a task may call a provider: litellm imported once, the way a run imports it (offline cost map,
collector paused then frozen, loggers on stderr), for every task forked after it. A module of its
own because the fork server's preload list names modules; it is left out when every task names a
``scripted:`` model (no task then imports litellm, and the server saves its ~4 s of CPU)."""

from ctxagent.agent.litellm_backend import load_litellm

load_litellm()
