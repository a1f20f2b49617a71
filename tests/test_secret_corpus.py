"""Issue 31: the secret scan measured on real inputs nobody here wrote, and on planted credentials.

The corpora are built by ``benchmarks/secret_corpus.py`` (also ``python -m benchmarks.secrets``, which
prints the figures the docs give): the installed packages' data files and real tool output made now
must come back byte for byte; every planted credential, inline and JSON-escaped, must be removed whole.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from ctxagent.agent.model import ToolCall
from ctxagent.sessions.redact import RedactingStore, Redactor
from ctxagent.tools.base import ToolContext
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.toolset import make_toolset

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `benchmarks` is a top-level folder of the repository, not installed
    sys.path.insert(0, str(ROOT))
corpus = importlib.import_module("benchmarks.secret_corpus")
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def no_change(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list, list[str]]:
    return corpus.no_change(tmp_path_factory.mktemp("corpus"))  # type: ignore[no-any-return]


def test_every_file_of_the_no_change_corpus_comes_back_byte_for_byte(no_change) -> None:
    samples, _, missing = no_change
    names = {sample.name for sample in samples}
    assert any(name.startswith("litellm/") for name in names) and "certifi/cacert.pem" in names
    assert len(samples) > 200, missing
    redactor = Redactor()
    altered = [(sample.name, score) for sample in samples
               if (score := corpus.score_no_change([sample], redactor.data)).altered]
    assert altered == []
    tools = [name for name in names if name.startswith("$ ")]
    assert {"$ pip list -v", "$ env"} <= set(tools), missing  # real tool output is part of it


def test_documented_example_credentials_are_the_only_values_replaced_in_aws_examples(no_change) -> None:
    """botocore's examples hold sample credentials in credential fields (an IAM password, a KMS grant
    token, a presigned URL's signature): those are replaced, nothing else in those files is."""
    _, examples, _ = no_change
    if not examples:
        pytest.skip("botocore is not installed")
    redactor = Redactor()
    replaced = 0
    for sample in examples:
        out = redactor.data(sample.data).decode()
        for marker in re.finditer(corpus.MARKER_RE, out):
            replaced += 1
            assert re.search(corpus.EXAMPLE_CREDENTIAL, out[:marker.start()]), (sample.name, out[marker.start() - 80:])
    assert replaced < 20  # a handful among ~400 files: the fields that hold credentials


def test_every_planted_secret_is_removed_whole_and_nothing_else_is_touched() -> None:
    cases = corpus.secret_cases()
    score = corpus.score_secrets(cases, lambda env: Redactor.from_env(env))
    assert score.planted > 400 and score.near_misses > 30
    assert score.missed == []
    assert score.over == []
    # the same, as bytes (offloaded outputs) and as one file
    for case in cases[::7]:
        redactor = Redactor.from_env(case.env)
        assert redactor.data(case.text.encode()) == redactor.text(case.text).encode()


def test_the_price_map_in_litellm_was_rewritten_by_offloading(tmp_path) -> None:
    """Regression (issue 31): offloading litellm's bundled price and context-window map replaced 1,564
    prices (``"input_cost_per_token": 1.25e-05`` stored and shown as ``[REDACTED:header]``), so the
    stored output, its sha256 and what the model read were not the file."""
    spec = importlib.util.find_spec("litellm")  # its folder, without importing it
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).parent / "model_prices_and_context_window_backup.json"
    toolset = make_toolset(["shell"], ToolContext(RedactingStore(tmp_path / "outputs"), tmp_path),
                           OffloadPolicy(limit_tokens=2_000))
    outcome = toolset.call(ToolCall("c1", "shell", json.dumps({"command": f"cat {source}"})))
    assert outcome.output is not None
    stored = tmp_path / "outputs" / Path(outcome.output.path).name
    assert stored.read_bytes() == source.read_bytes()
    assert outcome.output.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert "REDACTED" not in outcome.content
