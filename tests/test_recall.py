"""recall: the built-in tool that searches everything a session has seen (transcript and stored
outputs), through the real CLI with the scripted model, and in process through the real toolset."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from clihelp import call, ctxagent, records, script, tool_messages
from ctxagent.errors import ProfileError
from ctxagent.messages import ToolCall
from ctxagent.profile import Profile, parse_profile
from ctxagent.sessions import records as rec
from ctxagent.sessions.store import OutputStore
from ctxagent.tokens import count_text
from ctxagent.tools import patterns, recall_index
from ctxagent.tools import recall as recall_mod
from ctxagent.tools.base import ToolContext
from ctxagent.tools.offload import OffloadPolicy
from ctxagent.tools.toolset import BUILTIN, make_toolset

FACT_LINE = 1500
FACT = "the vault code is ZEBRA-7731"
# the fact reaches the output through sed, so the call's own arguments never hold it whole
BIG = f"seq 1 3000 | sed 's/^{FACT_LINE}$/the va''ult co''de is ZEB''RA-77''31/'"
PROFILE = """\
context_window: 32000
tool_result_limit: 1000
tools: [shell, read_output, grep_output, recall]
"""


def run(tmp_path: Path, session: str, replies: list[dict[str, Any]], profile: str = PROFILE) -> dict[str, str]:
    """Run ``replies`` (scripted) through the CLI; the tool results by call id."""
    path = tmp_path / f"{session}.yaml"
    path.write_text(profile, encoding="utf-8")
    model = script(tmp_path / f"{session}-script.yaml", [*replies, {"content": "done"}])
    out = ctxagent("run", "--batch", "--allow", "shell", "--session", session, "--model", model,
                   "--profile", str(path), "find it")
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    return tool_messages(session)


def line_range(result: str, handle: str) -> tuple[int, int]:
    match = re.search(rf"{re.escape(handle)} lines (\d+)-(\d+) \(stored output, turn \d+\)", result)
    assert match, result
    return int(match.group(1)), int(match.group(2))


# ---------------------------------------------------------------- through the CLI


def test_recall_finds_a_fact_only_in_an_offloaded_output_by_handle_and_line_range(tmp_path: Path) -> None:
    results = run(tmp_path, "vault", [
        {"tool_calls": [call("big", "shell", command=BIG)]},
        {"tool_calls": [call("ferry", "shell", command="echo the fe''rry leaves from pi''er NINE at 06:45")]},
        {"tool_calls": [call("rc", "recall", query="vault code")]},
        {"tool_calls": [call("rc2", "recall", query="which pier does the ferry leave from")]},
    ])
    assert "ZEBRA" not in results["big"] and "@big" in results["big"]  # offloaded: only the preview is in view
    first, last = line_range(results["rc"], "@big")
    assert first <= FACT_LINE <= last and last - first < recall_index.CHUNK_LINES
    stored = tmp_path / "ctxagent-data/sessions/vault/outputs/big.out"
    assert stored.read_text().splitlines()[FACT_LINE - 1] == FACT  # the range names the line read_output shows
    assert results["rc"].startswith("recall 'vault code' (bm25): ")
    assert f"1. @big lines {first}-{last} (stored output, turn 1): " in results["rc"] and FACT in results["rc"]
    hit = results["rc2"].splitlines()[1]  # an old tool result kept inline: its handle and seq
    assert re.match(r"1\. @ferry \(seq \d+, tool, turn 2\): .*pier NINE at 06:45", hit), results["rc2"]


def test_regex_mode_and_a_bad_regex_through_the_cli(tmp_path: Path) -> None:
    results = run(tmp_path, "rx", [
        {"tool_calls": [call("big", "shell", command=BIG)]},
        {"tool_calls": [call("rx", "recall", query=r"ZEBRA-\d{4}", regex=True),
                        call("bad", "recall", query="(unclosed[", regex=True),
                        call("k", "recall", query="vault", top_k=0)]},
    ])
    assert results["rx"].startswith(r"recall 'ZEBRA-\\d{4}' (regex): 1 of 1 matching documents")
    first, last = line_range(results["rx"], "@big")
    assert first <= FACT_LINE <= last and FACT in results["rx"]
    assert results["bad"].startswith("ERROR: invalid regex '(unclosed[': ")
    assert results["k"] == "ERROR: top_k must be between 1 and 50, not 0"


def test_binary_output_is_skipped_and_text_output_with_the_word_is_found(tmp_path: Path) -> None:
    results = run(tmp_path, "bin", [
        {"tool_calls": [call("bin", "shell", command=r"printf 'KUM%sQUAT\000\001\002\003' ''"),
                        call("txt", "shell", command="printf 'KUM%sQUAT is a fruit\\n' ''")]},
        {"tool_calls": [call("rc", "recall", query="kumquat")]},
    ])
    [output] = [r for r in records("bin") if r["kind"] == "output" and r["handle"] == "@bin"]
    assert output["binary"] is True
    lines = results["rc"].splitlines()
    assert lines[0].startswith("recall 'kumquat' (bm25): 1 of 1 matching documents"), results["rc"]
    assert lines[1].startswith("1. @txt ") and "KUMQUAT is a fruit" in lines[1]
    assert lines[-1] == "[binary outputs not searched: @bin]"


def test_index_refreshes_after_new_outputs_in_the_same_run(tmp_path: Path) -> None:
    walrus = "for i in $(seq 1 400); do echo row $i; if [ $i = 200 ]; then echo the WAL''RUS sleeps at dawn; fi; done"
    results = run(tmp_path, "fresh", [
        {"tool_calls": [call("big", "shell", command=BIG)]},
        {"tool_calls": [call("before", "recall", query="walrus")]},
        {"tool_calls": [call("wal", "shell", command=walrus)]},
        {"tool_calls": [call("after", "recall", query="walrus")]},
    ])
    assert results["before"].startswith("recall 'walrus' (bm25): no match in ")
    assert "@wal" in results["wal"] and "WALRUS" not in results["wal"]  # offloaded, fact not in the preview
    hit = results["after"].splitlines()[1]
    assert hit.startswith("1. @wal lines 176-210 (stored output, turn 3): …row ")  # line 201 is the fact
    assert "row 200 the WALRUS sleeps at dawn row 201" in hit


# ---------------------------------------------------------------- in process, through the toolset


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[ToolContext, Path]]:
    store = OutputStore(tmp_path / "outputs")
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text(rec.dumps(rec.SessionHeader(name="s", model="m", profile="default",
                                                      context_window=32000)) + "\n")
    yield ToolContext(store, tmp_path, transcript=transcript), transcript


def append(transcript: Path, seq: int, role: str, content: str, handle: str | None = None, **extra: Any) -> None:
    message = {"role": role, "content": content, **extra}
    with open(transcript, "a", encoding="utf-8") as fh:
        fh.write(rec.dumps(rec.MessageRecord(seq=seq, turn=seq, tokens=5, message=message, handle=handle)) + "\n")


def call_recall(ctx: ToolContext, **arguments: Any) -> tuple[str, bool]:
    toolset = make_toolset(["recall"], ctx, OffloadPolicy(limit_tokens=20_000))
    outcome = toolset.call(ToolCall(id="r", name="recall", arguments=json.dumps(arguments)))
    return outcome.content, outcome.is_error


def test_recall_is_a_read_tool_that_takes_handles_as_text() -> None:
    tool = BUILTIN["recall"]
    assert tool.kind == "read" and tool.resolve_handles is False
    assert "no longer in your context" in tool.description and "compaction notes" in tool.description


def test_new_outputs_and_messages_are_indexed_without_a_rebuild(session) -> None:
    ctx, transcript = session
    append(transcript, 0, "user", "find the otter")
    assert call_recall(ctx, query="heron")[0].startswith("recall 'heron' (bm25): no match in 1 documents (")
    index = ctx.state["recall"]  # the session's own: another session's context holds another
    ctx.store.put_bytes("@h1", b"line\n" * 50 + b"a grey heron waits\n")
    shell = {"name": "shell", "arguments": "{\"x\": \"heron\"}"}
    append(transcript, 1, "assistant", "", tool_calls=[{"id": "c", "type": "function", "function": shell}])
    content, error = call_recall(ctx, query="heron")
    assert not error and ctx.state["recall"] is index  # refreshed, not rebuilt
    assert "@h1 lines 36-51 (stored output): " + "line " * 15 + "a grey heron waits" in content
    assert "seq 1 (assistant, turn 1): shell({\"x\": \"heron\"})" in content  # tool-call arguments count


def test_a_changed_output_rebuilds_the_index(session) -> None:
    ctx, _ = session
    ctx.store.put_bytes("@h", b"alpha\n")
    assert "@h line 1" in call_recall(ctx, query="alpha")[0]
    ctx.store.put_bytes("@h", b"beta beta\n")  # a redaction rewrote it
    assert "no match" in call_recall(ctx, query="alpha")[0]
    assert "@h line 1" in call_recall(ctx, query="beta")[0]


def test_non_utf8_output_is_decoded_with_replacement(session) -> None:
    ctx, _ = session
    ctx.store.put_bytes("@latin", b"caf\xe9 au lait\nthe pelican sings\n")
    content, _ = call_recall(ctx, query="pelican")
    assert "1. @latin lines 1-2 (stored output): caf\ufffd au lait the pelican sings" in content


def test_recall_does_not_search_its_own_results_or_their_masked_copies(session) -> None:
    ctx, transcript = session
    arguments = json.dumps({"query": "otter"})
    recall_call = {"id": "r1", "type": "function", "function": {"name": "recall", "arguments": arguments}}
    append(transcript, 0, "user", "where did the otter go")
    append(transcript, 1, "assistant", "", tool_calls=[recall_call])
    append(transcript, 2, "tool", "1. seq 0 (user, turn 0): where did the otter go", handle="@r1", tool_call_id="r1")
    ctx.store.put_bytes("@r1", b"1. seq 0 (user, turn 0): where did the otter go\n")  # a masked copy, no sidecar
    content, _ = call_recall(ctx, query="otter")
    assert content.splitlines()[0].startswith("recall 'otter' (bm25): 1 of 1 matching documents")
    assert content.splitlines()[1] == "1. seq 0 (user, turn 0): where did the otter go"


def test_an_output_over_the_byte_limit_is_searched_in_part_and_named(session, monkeypatch) -> None:
    ctx, _ = session
    monkeypatch.setattr(recall_index, "MAX_OUTPUT_BYTES", 100)
    ctx.store.put_bytes("@long", b"beaver\n" + b"x\n" * 100 + b"platypus\n")
    assert "1. @long lines 1-35 (stored output): beaver" in call_recall(ctx, query="beaver")[0]
    content, _ = call_recall(ctx, query="platypus")
    assert content.startswith("recall 'platypus' (bm25): no match in ")
    assert "[outputs searched only in their first bytes (16 MiB each, 256 MiB a session): @long;" in content


def test_regex_scans_newest_first_and_a_bad_or_slow_pattern_is_an_error(session, monkeypatch) -> None:
    ctx, transcript = session
    for seq in range(3):
        append(transcript, seq, "user", f"ticket PRJ-{100 + seq} opened")
    content, error = call_recall(ctx, query=r"PRJ-1\d\d", regex=True)
    assert not error and [line[:12] for line in content.splitlines()[1:]] == ["1. seq 2 (us", "2. seq 1 (us",
                                                                              "3. seq 0 (us"]
    content, error = call_recall(ctx, query="a{2,1}", regex=True)
    assert error and content.startswith("ERROR: invalid regex 'a{2,1}': ")
    append(transcript, 3, "user", "a" * 40 + "!")
    monkeypatch.setattr(patterns, "SECONDS", 0.05)
    content, error = call_recall(ctx, query="(a|aa)+$", regex=True)  # exponential backtracking
    assert error and content.startswith("ERROR: recall gave up after 0.05 s: the pattern '(a|aa)+$' is too slow")


def test_snippet_is_centred_on_the_rarest_term_and_bounded(session) -> None:
    ctx, transcript = session
    filler = " ".join(f"word{i}" for i in range(400))
    append(transcript, 0, "user", f"{filler} the common term and the rare quokka here {filler}")
    append(transcript, 1, "user", "common common common")
    content, _ = call_recall(ctx, query="common quokka")
    hit = content.splitlines()[1]
    text = hit.split(": ", 1)[1]
    assert hit.startswith("1. seq 0 (user, turn 0): …") and text.endswith("…")
    assert len(text) <= recall_mod.SNIPPET_CHARS and "rare quokka" in text
    assert abs(text.index("quokka") - len(text) // 2) < 40


def test_the_whole_result_stays_under_its_token_bound(session) -> None:
    ctx, transcript = session
    for seq in range(60):
        append(transcript, seq, "user", f"needle {seq} " + " ".join(f"w{seq}x{i}" for i in range(200)))
    content, _ = call_recall(ctx, query="needle", top_k=50)
    assert count_text(content) <= recall_mod.RESULT_MAX_TOKENS
    shown = [line for line in content.splitlines() if re.match(r"\d+\. seq", line)]
    assert 5 < len(shown) < 50 and f"[{50 - len(shown)} more hits not shown" in content


def test_recall_profile_key_is_strict() -> None:
    assert Profile().recall.embedding_model is None and Profile().recall.top_k == 8
    assert parse_profile("recall: {embedding_model: openai/e, top_k: 3}\n", source="p").recall.top_k == 3
    with pytest.raises(ProfileError) as err:
        parse_profile("recall: {embeding_model: openai/e}\n", source="p.yaml")
    assert err.value.key == "recall.embeding_model"


# ---------------------------------------------------------------- embeddings (a local /v1/embeddings server)

SYNONYMS = {"automobile": "car", "vehicle": "car"}
DIM = 1024  # 64 made 'ar' and 'car' share a bucket


def vector(text: str) -> list[float]:
    """Hashed bag of words; synonyms share a bucket, so only the embeddings know them alike."""
    out = [0.0] * DIM
    for word in re.findall(r"\w+", text.lower()):
        word = SYNONYMS.get(word, word)
        out[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return out


class Embeddings(BaseHTTPRequestHandler):
    fail = False
    inputs: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        type(self).inputs.extend(texts)
        status, reply = (500, {"error": {"message": "embedder down", "type": "server_error"}}) if self.fail else (
            200, {"object": "list", "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1},
                  "data": [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)]})
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def embedder() -> Iterator[tuple[str, type[Embeddings]]]:
    handler = type("Handler", (Embeddings,), {"fail": False, "inputs": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


def test_embeddings_from_the_profile_find_a_synonym_bm25_cannot(tmp_path: Path, embedder) -> None:
    base, handler = embedder
    profile = PROFILE + f"recall: {{embedding_model: openai/hash-embed, api_base: '{base}', top_k: 1}}\n"
    results = run(tmp_path, "emb", [
        {"tool_calls": [call("park", "shell", command="echo the red c''ar is parked on level 3")]},
        {"tool_calls": [call("rc", "recall", query="automobile")]},
    ], profile=profile)
    lines = results["rc"].splitlines()
    assert lines[0].startswith("recall 'automobile' (bm25+embeddings): 1 of "), results["rc"]  # top_k: 1
    assert lines[1].startswith("1. @park (seq 3, tool, turn 1): ") and "red car is parked on level 3" in lines[1], lines
    assert len(lines) == 2
    assert "automobile" in handler.inputs  # the query went to the embedding server


def test_an_embedding_failure_falls_back_to_bm25_with_a_note(session, embedder) -> None:
    ctx, transcript = session
    base, handler = embedder
    handler.fail = True
    append(transcript, 0, "user", "the red car is parked on level 3")
    ctx = ToolContext(ctx.store, ctx.workdir, transcript=transcript, recall_model="openai/hash-embed",
                      recall_api_base=base)
    content, error = call_recall(ctx, query="parked car")
    assert not error and content.startswith("recall 'parked car' (bm25): 1 of 1")
    assert "1. seq 0 (user, turn 0): the red car is parked on level 3" in content
    assert "[embedding with openai/hash-embed failed (" in content and "ranked by BM25 only]" in content
    assert handler.inputs, content  # it was asked


@pytest.mark.timeout(60)
def test_a_long_run_of_word_characters_is_indexed_in_linear_time():
    """Regression: the identifier pattern (``\\w*[^\\W_]_+[^\\W_]\\w*``) backtracked over every start in a run
    of word characters without an inner "_": a 32,000-character run (a hex or base64 blob in a tool output)
    took 48 s to index, 200,000 characters hours. The terms are the same (letters and digits; identifiers
    with an inner "_", whole)."""
    blob = "9f" * 100_000
    assert recall_index.words(f"see {blob} and max_tokens or __init__ _a_b_ X__Y") == [
        "see", blob, "and", "max", "tokens", "or", "init", "a", "b", "x", "y", "max_tokens", "_a_b_", "x__y"]
