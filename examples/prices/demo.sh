#!/usr/bin/env bash
# Offline demo on real input: the agent reads litellm's bundled model price map (~3.4 MB) with the
# shell tool, the output is offloaded, and the model greps it by handle for one entry.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export CTXAGENT_DATA_DIR="${CTXAGENT_DATA_DIR:-$(mktemp -d)}"
# a fresh session each run: with CTXAGENT_DATA_DIR set, a second run must not resume the first one
# (its scripted replies are all used: it would end with "script exhausted")
session="prices-demo-$(date +%Y%m%d-%H%M%S)-$$"

echo "== ctxagent run (batch, scripted model) =="
# --allow shell: the bundled profiles ask before running commands, and a batch run never asks
ctxagent run --batch --allow shell --session "$session" --model "scripted:$here/script.yaml" \
  "What does gpt-4o cost per million tokens, and what is its context window?"

echo
echo "== what the model saw of the 3.4 MB output (the preview in the transcript) =="
ctxagent inspect transcript --session "$session" --json | python "$here/show_preview.py" prices

echo
echo "== the offloaded outputs =="
ctxagent inspect transcript --session "$session" | grep -E '^ +(output|end) '
