"""Preloaded by the fork server of ``ctxagent batch`` (cli/batch_fork.py) when a task may call a
provider: litellm imported once, the way a run imports it (offline cost map, collector paused then
frozen, loggers on stderr), for every task forked after it."""

from ctxagent.agent.litellm_backend import load_litellm

load_litellm()
