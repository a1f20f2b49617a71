"""Preloaded by the fork server (batch/forkserver.py) after batch/preload.py when a task may call a
provider: litellm imported once, the way a run imports it. Left out when every task names a
``scripted:`` model (no task imports litellm, and the server saves its ~4 s of CPU)."""

from ctxagent.agent.litellm_backend import load_litellm

load_litellm()
