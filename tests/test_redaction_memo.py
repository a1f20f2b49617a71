"""What the redactor remembers to keep writing a record cheap (one environment comparison a record, short
texts scanned once) never hides a secret: a changed environment and a different redactor are seen."""

from __future__ import annotations

from ctxagent.sessions import redact
from ctxagent.sessions.redact import Redactor
from ctxagent.sessions.redact.redactor import SHORT_CHARS


def test_the_process_redactor_follows_every_change_of_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("CTX_MEMO_API_KEY", "first-secret-value")
    first = redact.default()
    assert redact.default() is first  # the same environment: the same redactor, not a new scan of it
    assert first.text("x first-secret-value") == "x [REDACTED:env:CTX_MEMO_API_KEY]"
    monkeypatch.setenv("CTX_MEMO_API_KEY", "second-secret-value")  # same names, another value
    assert redact.default().text("first-secret-value second-secret-value") == (
        "first-secret-value [REDACTED:env:CTX_MEMO_API_KEY]")
    monkeypatch.delenv("CTX_MEMO_API_KEY")
    assert redact.default().text("second-secret-value") == "second-secret-value"


def test_a_remembered_short_text_belongs_to_its_redactor() -> None:
    secret = "s3cr3t-value-9"
    keeping, other = Redactor({secret: "env:A_TOKEN"}), Redactor({})
    for _ in range(2):  # the second time from memory
        assert keeping.text(secret) == "[REDACTED:env:A_TOKEN]"
        assert other.text(secret) == secret
    long = "y" * SHORT_CHARS + secret  # over the remembered length: scanned every time, same answer
    assert keeping.text(long) == keeping.text(long) == "y" * SHORT_CHARS + "[REDACTED:env:A_TOKEN]"
