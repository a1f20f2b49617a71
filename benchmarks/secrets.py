"""Issue 31's figures: precision and recall of the secret scan, on real files and planted credentials.

Run: ``python -m benchmarks.secrets [--json] [--show N]``. The corpora are ``benchmarks/secret_corpus.py``'s:

- **no change** — the data files of the installed packages (litellm, certifi, botocore, lock and
  RECORD files) and real tool output made now: files altered and values altered (must be 0), and the
  scan's speed on them (``Redactor.data``, as an offloaded output is scanned);
- **documented examples** — AWS's ``examples-1.json`` files, which hold sample credentials in
  credential fields: values replaced, and whether each stands under such a field;
- **secrets** — realistic credentials of every shape, inline, JSON-escaped and twice-escaped, and
  near misses: recall (secrets removed whole / planted) and precision (texts where exactly the
  planted secret was replaced / texts where anything was).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import secret_corpus as corpus


def run(show: int = 0) -> dict[str, Any]:
    """Every figure, as a dict (``show``: list that many altered files and missed secrets)."""
    from ctxagent.sessions.redact import Redactor

    with tempfile.TemporaryDirectory() as folder:
        plain, examples, missing = corpus.no_change(Path(folder))
    redactor = Redactor()
    redactor.data(b"x" * (1 << 20))  # the prefilter compiled before the clock starts
    start = time.perf_counter()
    kept = corpus.score_no_change(plain, redactor.data)
    seconds = time.perf_counter() - start
    documented = corpus.score_no_change(examples, redactor.data)
    cases = corpus.secret_cases()
    secrets = corpus.score_secrets(cases, lambda env: Redactor.from_env(env))
    randoms = corpus.random_recall(Redactor())
    under_fields = sum(bool(re.search(corpus.EXAMPLE_CREDENTIAL, context[:context.index("[REDACTED")]))
                       for _, _, context in documented.altered)
    return {
        "no_change": {"files": kept.files, "mb": round(kept.bytes / 1e6, 1), "tool_outputs":
                      sum(s.name.startswith("$ ") for s in plain), "files_altered": len(kept.altered),
                      "values_altered": kept.values_altered, "mb_per_s": round(kept.bytes / 1e6 / seconds, 1),
                      "altered": kept.altered[:show], "missing": missing},
        "documented_examples": {"files": documented.files, "files_altered": len(documented.altered),
                                "values_replaced": documented.values_altered,
                                "first_under_a_credential_field": under_fields, "altered": documented.altered[:show]},
        "secrets": {"cases": len(cases), "planted": secrets.planted, "caught": secrets.caught,
                    "recall": round(secrets.recall, 4), "replaced_texts": secrets.replaced_cases,
                    "exact_texts": secrets.exact_cases, "precision": round(secrets.precision, 4),
                    "near_misses": secrets.near_misses, "missed": secrets.missed[:show], "over": secrets.over[:show]},
        "random_values": randoms,
    }


def table(data: dict[str, Any]) -> str:
    keep, doc, sec = data["no_change"], data["documented_examples"], data["secrets"]
    lines = [
        f"no-change corpus: {keep['files']:,} files ({keep['tool_outputs']} of them real tool output), "
        f"{keep['mb']:,} MB: {keep['files_altered']} files altered, {keep['values_altered']} values altered "
        f"({keep['mb_per_s']} MB/s)" + (f"; missing here: {', '.join(keep['missing'])}" if keep["missing"] else ""),
        f"AWS documented examples: {doc['files']} files, {doc['files_altered']} with a value replaced, "
        f"{doc['values_replaced']} values (first of each file under a credential field: "
        f"{doc['first_under_a_credential_field']}/{doc['files_altered']})",
        f"secret corpus: {sec['planted']} planted credentials in {sec['cases']} texts (inline, JSON-escaped, "
        f"twice-escaped; {sec['near_misses']} near misses): recall {sec['caught']}/{sec['planted']} = "
        f"{sec['recall']:.1%}, precision {sec['exact_texts']}/{sec['replaced_texts']} = {sec['precision']:.1%}",
        "random values under a key or password name (share removed whole, 1,000 each): "
        + ", ".join(f"{what} {share:.1%}" for what, share in data["random_values"].items()),
    ]
    for name, count, context in keep["altered"] + doc["altered"]:
        lines.append(f"  altered {name} ({count}): {context!r}")
    for kind, text in sec["missed"]:
        lines.append(f"  missed {kind}: {text[:160]!r}")
    for kind, text in sec["over"]:
        lines.append(f"  over-replaced {kind}: {text[:160]!r}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.secrets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--show", type=int, default=10, metavar="N", help="list N altered files and misses")
    args = parser.parse_args(argv)
    data = run(args.show)
    print(json.dumps(data, indent=1) if args.json else table(data))
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
