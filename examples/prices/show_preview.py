"""Print the head and tail of what the model saw for one tool call (JSONL transcript on stdin)."""

import json
import sys

call_id = sys.argv[1]
for line in sys.stdin:
    record = json.loads(line)
    if record["kind"] == "message" and record["message"].get("tool_call_id") == call_id:
        text = record["message"]["content"]
        lines = text.splitlines()
        print("\n".join(lines[:5]), "\n   ...", "\n".join(lines[-4:]), sep="\n")
        print(f"-- {len(text):,} characters, {record['tokens']:,} tokens in the context;",
              '\'"gpt-4o": {\' in the preview:', '"gpt-4o": {' in text)
