"""Secrets kept off disk: typed markers in transcripts, outputs and logs; owner-only files.

Every fake key is composed at run time from a seeded generator, so no key-looking literal is
committed (secret scanners stay quiet) and the greps below look for exactly what the run saw.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import stat
import string
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from clihelp import call, ctxagent, records, script, tool_messages
from ctxagent.sessions import records as recs
from ctxagent.sessions.redact import RedactingStore, Redactor, rules, scan
from ctxagent.sessions.redact import redactor as redaction
from ctxagent.sessions.redact.redactor import CHUNK_BYTES, OVERLAP_BYTES
from ctxagent.testing import error

ALNUM = string.ascii_letters + string.digits
ENV_NAME = "CI_DEPLOY_TOKEN"
# Values under a key name, a header or a URL are secrets when they read as random text (issue 31): these
# replace the sequential or repeating fakes the tests used before (``abc123xyz``, ``Zk9Zk9...``, ``A`` * 30),
# which a precise scan rightly leaves alone (detect-secrets' sequential-string filter, the entropy test).
TOKEN = "".join(random.Random(31).choices(string.ascii_letters + string.digits, k=14))


def fake_keys(seed: int = 6) -> dict[str, str]:
    """One fake secret of each shape, keyed by the marker kind that must replace it."""
    rnd = random.Random(seed)

    def chars(n: int, alphabet: str = ALNUM) -> str:
        return "".join(rnd.choice(alphabet) for _ in range(n))

    return {
        "openai-key": "sk-" + chars(48),
        "openai-proj": "sk-" + "proj-" + chars(56, ALNUM + "_-"),
        "anthropic-key": "sk-" + "ant-" + "api03-" + chars(90, ALNUM + "_-"),
        "aws-access-key": "AK" + "IA" + chars(16, string.ascii_uppercase + string.digits),
        "github-token": "gh" + "p_" + chars(36),
        "github-pat": "github" + "_pat_" + chars(70, ALNUM + "_"),
        "google-api-key": "AI" + "za" + chars(35, ALNUM + "_-"),
        "slack-token": "xo" + "xb-" + chars(12, string.digits) + "-" + chars(24),
        "jwt": "ey" + "J" + chars(24) + ".ey" + "J" + chars(40) + "." + chars(43, ALNUM + "_-"),
        "bearer-token": chars(40),  # only a secret by where it stands: after "Authorization: Bearer"
        "private-key": chars(64, ALNUM + "+/"),  # a line of a PEM block's body
        "secret": chars(14),  # DB_PASSWORD=...
        "env": chars(26),  # the value of $CI_DEPLOY_TOKEN, no particular shape
    }


def pem(body: str) -> str:
    kind = "RSA " + "PRIVATE KEY"
    return f"-----BEGIN {kind}-----\n{body}\n{body[::-1]}\n-----END {kind}-----\n"


def secrets_text(keys: dict[str, str]) -> str:
    """A config file holding every key, in the places keys are found in the wild."""
    return (f"OPENAI_KEY_VALUE {keys['openai-key']}\nproject {keys['openai-proj']}\n"
            f"anthropic {keys['anthropic-key']}\naws_access_key_id = {keys['aws-access-key']}\n"
            f"gh {keys['github-token']} pat {keys['github-pat']}\ngoogle {keys['google-api-key']}\n"
            f"slack {keys['slack-token']}\nsession {keys['jwt']}\n"
            f"Authorization: Bearer {keys['bearer-token']}\n{pem(keys['private-key'])}"
            f"DB_PASSWORD={keys['secret']}\ndeploy {keys['env']}\n")


def every_file(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def assert_nowhere(root: Path, keys: dict[str, str]) -> None:
    """No key, nor its reversed copy (the PEM's second line), in any file under ``root``."""
    files = every_file(root)
    assert files
    for path in files:
        data = path.read_bytes()
        for kind, key in keys.items():
            assert key.encode() not in data, f"{kind} key found in {path}"
            assert key[::-1].encode() not in data or kind != "private-key", f"PEM body in {path}"


# ---------------------------------------------------------------- the redactor


@pytest.mark.parametrize("kind", [k for k in fake_keys() if k not in ("bearer-token", "private-key", "secret",
                                                                       "env")])
def test_each_shape_gets_its_typed_marker(kind):
    key = fake_keys()[kind]
    marker = "[REDACTED:" + {"openai-proj": "openai-key", "github-pat": "github-token"}.get(kind, kind) + "]"
    text = Redactor().text(f"before {key} after")
    assert text == f"before {marker} after"
    assert Redactor().text(text) == text  # markers are never redacted again


def test_context_shapes_and_exact_environment_values():
    keys = fake_keys()
    redactor = Redactor.from_env({ENV_NAME: keys["env"], "TIKTOKEN_CACHE_DIR": "/opt/cache/tiktoken",
                                  "SHORT_TOKEN": "abc", "PATH": "/usr/bin:/bin"})
    text = redactor.text(secrets_text(keys))
    assert "Authorization: Bearer [REDACTED:bearer-token]" in text
    assert "[REDACTED:private-key]" in text and "END RSA" not in text
    assert "DB_PASSWORD=[REDACTED:secret]" in text
    assert "deploy [REDACTED:env:CI_DEPLOY_TOKEN]" in text
    assert all(key not in text for key in keys.values())
    harmless = "cache in /opt/cache/tiktoken, SHORT_TOKEN abc"
    assert redactor.text(harmless) == harmless
    assert redactor.text(f'export {ENV_NAME}="{keys["env"]}"') == f'export {ENV_NAME}="[REDACTED:env:CI_DEPLOY_TOKEN]"'


def test_a_value_after_a_prefix_is_named_by_its_own_shape_only_when_that_shape_has_no_prefix():
    """``Authorization: Bearer sk-...`` is an openai-key; a header value that reads as another prefixed
    shape (``TOKEN=...``, an assignment) keeps the header's kind."""
    redactor = Redactor()
    assert redactor.text("Authorization: Bearer sk-" + "A" * 30) == "Authorization: Bearer [REDACTED:openai-key]"
    assert redactor.text("Authorization: Bearer " + TOKEN * 2) == "Authorization: Bearer [REDACTED:bearer-token]"
    assert redactor.text(f"x-api-key: TOKEN={TOKEN}") == "x-api-key: [REDACTED:header]"


def test_the_userinfo_of_a_url_is_redacted_and_its_scheme_kept():
    """The URL shapes start at the scheme, up to 21 characters before the "://" that anchors them."""
    redactor = Redactor()
    for text, clean in (("git clone https://bob:hunter22pw@github.com/x",
                         "git clone https://bob:[REDACTED:url-password]@github.com/x"),
                        ("curl ftp://" + TOKEN + "xy@files.example/x",
                         "curl ftp://[REDACTED:url-userinfo]@files.example/x")):
        assert redactor.text(text) == clean and redactor.data(text.encode()) == clean.encode()


def test_case_insensitive_shapes_are_found_in_non_ascii_text():
    """Non-ASCII text takes the branch that finds the lower-case anchors with a case-insensitive regex
    (``lower()`` may move positions there), whatever their case: ``BEARER``, ``Password``."""
    redactor = Redactor()
    for text, clean in (("caf\u00e9 BEARER " + TOKEN + "xy", "caf\u00e9 BEARER [REDACTED:bearer-token]"),
                        ("na\u00efve Password: Hunter2hunter", "na\u00efve Password: [REDACTED:password]")):
        assert redactor.text(text) == clean


def test_an_ocp_apim_subscription_key_header_was_left_in_clear():
    """Regression (issue 17, found by mutation testing): a ``subscription-key`` header, named in the
    header shape, was never tried in ASCII text or bytes: its only anchor, "key", looked back 4, 3 or 0
    characters for the start of the name, not the 13 of "subscription-"."""
    for redactor in (Redactor(), Redactor(prefilter=False)):
        for text, clean in ((f"Ocp-Apim-Subscription-Key: {TOKEN}", "Ocp-Apim-Subscription-Key: [REDACTED:header]"),
                            (f"subscription-key: {TOKEN}", "subscription-key: [REDACTED:header]")):
            assert redactor.text(text) == clean and redactor.data(text.encode()) == clean.encode()


@pytest.mark.parametrize("text, clean", [
    (f'curl -H "X-Api-Key: {TOKEN}" https://h', 'curl -H "X-Api-Key: [REDACTED:header]" https://h'),
    (f"x-goog-api-key: {TOKEN}", "x-goog-api-key: [REDACTED:header]"),
    (f"X-Api-Key: {TOKEN}, not the key", "X-Api-Key: [REDACTED:header], not the key"),  # every hit of a needle
    (f"apikey: {TOKEN}", "apikey: [REDACTED:header]"),
    (f"X-Auth-Token: {TOKEN}", "X-Auth-Token: [REDACTED:header]"),
    (f"Cookie: sid={TOKEN}", "Cookie: [REDACTED:header]"),
    (f"GET https://h/p?api_key={TOKEN}&x=1", "GET https://h/p?api_key=[REDACTED:url-query]&x=1"),
    (f"GET https://h/p?x=1&access_token={TOKEN}", "GET https://h/p?x=1&access_token=[REDACTED:url-query]"),
    # every "&" tried, the one right after another too, and one between two others
    (f"GET https://h/p?x=1&&token={TOKEN}", "GET https://h/p?x=1&&token=[REDACTED:url-query]"),
    (f"GET https://h/p?x=1&y=2&token={TOKEN}&z=3", "GET https://h/p?x=1&y=2&token=[REDACTED:url-query]&z=3"),
    ("hotkey: Ctrl1234567", "hotkey: Ctrl1234567"),
])
def test_headers_and_query_parameters_named_like_keys(text, clean):
    redactor = Redactor()
    assert redactor.text(text) == clean and redactor.data(text.encode()) == clean.encode()


def test_ordinary_text_is_left_alone():
    benign = ["task-" + "a" * 40, "sk-local-no-key", "KEY_PATTERN = re.compile(r'x')", "MAX_TOKENS=4096",
              "max_tokens: 4096", "bearer tokens in Authorization headers", "see https://example.com/a:b@c",
              "TOKEN_LIMIT = 128000", "def get_token(self): return self.token", "ghost: 12", "eyJ",
              "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"]
    redactor = Redactor()
    for text in benign:
        assert redactor.text(text) == text


def test_a_json_password_and_mysql_p_were_left_in_clear():
    """Regression (a new user's trial): `"password": "..."` in JSON and `mysql -pSECRET` passed through;
    so did a lower-case `password=` or `--password=`. Code and prose naming a password stay as they are."""
    redactor = Redactor()
    for text, clear in [('{"password": "hunter2xyz"}', '{"password": "[REDACTED:password]"}'),
                        ('{\\"db_password\\": \\"S3cret!x\\"}', '{\\"db_password\\": \\"[REDACTED:password]\\"}'),
                        ("passwd: Tr0ub4dor&3", "passwd: [REDACTED:password]"),
                        ("mysqldump --password=Zx9-long db", "mysqldump --password=[REDACTED:password] db"),
                        ("mysql -u root -pS3cretPassw0rd db", "mysql -u root -p[REDACTED:password] db")]:
        assert redactor.text(text) == clear
        assert redactor.data(text.encode()) == clear.encode()
    for text in ["password = get_password()", "the password: expired", "mysql -u root -p db",
                 "password=hash_v2(x)", "if not password:", "mysql --port 3306 -h db"]:
        assert redactor.text(text) == text


def test_values_inside_json_text_and_structures():
    keys = fake_keys()
    value = 'quote"and\\slash-' + keys["env"]
    redactor = Redactor.from_env({ENV_NAME: value})
    arguments = json.dumps({"command": f"deploy --token '{value}'"})  # the value appears JSON-escaped
    assert value not in json.loads(redactor.text(arguments))["command"]
    # an exact value in each form it takes: as is, in JSON text with non-ASCII kept (as the transcript
    # writes it) and with \u escapes (json.dumps' default); not a character of it left
    odd = 'caf\u00e9 "quoted" back\\slash-' + keys["env"]
    exact = Redactor({odd: "env:X"})
    for text, expected in ((f"run {odd}", "run [REDACTED:env:X]"),
                           (json.dumps({"c": f"run {odd}"}, ensure_ascii=False), '{"c": "run [REDACTED:env:X]"}'),
                           (json.dumps({"c": f"run {odd}"}), '{"c": "run [REDACTED:env:X]"}')):
        assert exact.text(text) == expected and exact.data(text.encode()) == expected.encode()
    data = {"message": {"role": "tool", "content": keys["openai-key"], "tool_calls": [{"x": [keys["jwt"]]}]}, "n": 3}
    clean = redactor.value(data)
    assert clean == {"message": {"role": "tool", "content": "[REDACTED:openai-key]",
                                 "tool_calls": [{"x": ["[REDACTED:jwt]"]}]}, "n": 3}


def test_bytes_including_binary_and_utf8_are_redacted():
    keys = fake_keys()
    redactor = Redactor.from_env({ENV_NAME: "caf\u00e9-" + keys["env"]})
    blob = b"\x00\x89PNG\x00" + keys["aws-access-key"].encode() + b"\xff\xfe" + ("caf\u00e9-" + keys["env"]).encode()
    out = redactor.data(blob)
    assert out == b"\x00\x89PNG\x00[REDACTED:aws-access-key]\xff\xfe[REDACTED:env:CI_DEPLOY_TOKEN]"


def test_record_lines_match_the_plain_serializer_and_read_back():
    plain = recs.MessageRecord(seq=1, turn=1, tokens=5, message={"role": "user", "content": "hello \u00e9"})
    assert redaction.dumps(plain) == recs.dumps(plain)
    secret = recs.MessageRecord(seq=2, turn=1, tokens=5, message={"role": "user", "content": fake_keys()["jwt"]})
    back = recs.loads(redaction.dumps(secret))
    assert back.message["content"] == "[REDACTED:jwt]" and back.seq == 2


def test_file_redaction_streams_in_chunks_with_overlap(tmp_path):
    keys = fake_keys()
    rnd = random.Random(3)
    size = 3 * CHUNK_BYTES + 12345
    text = bytearray(rnd.randbytes(size).translate((b"abcdefgh ijk\n" * 20)[:256]))  # letters, spaces, newlines
    spots = [CHUNK_BYTES - 10, CHUNK_BYTES - OVERLAP_BYTES - 100, CHUNK_BYTES - OVERLAP_BYTES + 200,
             2 * CHUNK_BYTES - OVERLAP_BYTES - 1, 2 * CHUNK_BYTES - 3, 3 * CHUNK_BYTES + 2, size - 60]
    for spot, key in zip(spots, [keys["openai-key"], pem(keys["private-key"]), keys["jwt"], keys["anthropic-key"],
                                 keys["github-pat"], keys["slack-token"], keys["aws-access-key"]], strict=True):
        text[spot:spot + len(key)] = f" {key} ".encode()
    source = tmp_path / "big.out"
    source.write_bytes(bytes(text))
    redactor = Redactor()
    expected = redactor.data(bytes(text))
    assert redaction.redact_file(source, redactor)[0]
    assert source.read_bytes() == expected
    assert all(key.encode() not in expected for key in keys.values())
    assert stat.S_IMODE(source.stat().st_mode) == 0o600
    assert not redaction.redact_file(source, redactor)[0]  # nothing left: not rewritten


def test_file_redaction_memory_stays_bounded(tmp_path, monkeypatch):
    """Memory is bounded by the chunk sizes, not the file. At a quarter of the shipped chunk sizes (and of the
    threaded-digest threshold) a 4 MiB file is 16 redaction chunks, as a 16 MiB file is at full size: the
    same streaming path, a quarter of the work (the shipped 12 MiB cost 30 s of CPU under tracemalloc).
    A key on every 16th line, not every line: tracemalloc's cost is per allocation, and each match
    allocates (7.7 s of CPU with a key a line, 0.7 s so); every chunk still holds ~200 keys to replace,
    and the peak (37% of the file, measured) is held under half of it, so a copy that reads the whole file
    at once, or keeps what it wrote, fails."""

    monkeypatch.setattr(redaction, "CHUNK_BYTES", redaction.CHUNK_BYTES // 4)
    monkeypatch.setattr(scan, "CHUNK_BYTES", scan.CHUNK_BYTES // 4)
    monkeypatch.setattr(scan, "THREAD_MIN_BYTES", scan.THREAD_MIN_BYTES // 4)
    assert OVERLAP_BYTES < redaction.CHUNK_BYTES and rules.MAX_MATCH < OVERLAP_BYTES
    source = tmp_path / "huge.out"
    size = 16 * redaction.CHUNK_BYTES
    line = (("the quick brown fox " * 4 + "\n") * 15 + "the quick brown fox " * 4 + "sk-" + "Q" * 30 + "\n").encode()
    with open(source, "wb") as fh:
        for _ in range(size // len(line)):
            fh.write(line)
    tracemalloc.start()
    try:
        Redactor().copy_file(source, tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size // 2, peak  # a 16-chunk file, a few chunks (and the secrets' windows) in memory at once
    redacted = (tmp_path / "out").read_bytes()
    assert b"sk-Q" not in redacted and redacted.count(b"[REDACTED:openai-key]") == size // len(line)


def test_store_redacts_what_it_writes_and_keeps_npy_exact(tmp_path):
    keys = fake_keys()
    store = RedactingStore(tmp_path / "s" / "outputs")
    path = store.put_bytes("@a", f"x {keys['openai-key']} y".encode())
    assert path.read_bytes() == b"x [REDACTED:openai-key] y"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    raw = b"\x93NUMPY" + keys["openai-key"].encode()
    assert store.put_bytes("@b", raw, ".npy").read_bytes() == raw
    fd, spool = store.spool()
    os.write(fd, keys["jwt"].encode())
    os.close(fd)
    assert store.adopt(spool, "@c").read_bytes() == b"[REDACTED:jwt]"
    source = tmp_path / "src.txt"
    source.write_text(keys["slack-token"])
    assert store.put_file("@d", source).read_bytes() == b"[REDACTED:slack-token]"
    fd, _ = store.spool()
    os.close(fd)
    assert store.clean_spools() == 1 and not list(store.root.glob(".spool-*"))


def test_extra_values_get_the_api_key_marker_unless_the_environment_names_them():
    keys = fake_keys()
    redactor = Redactor.from_env({ENV_NAME: keys["env"]}, extra=[keys["secret"], keys["env"]])
    assert redactor.text(f"a {keys['secret']} b {keys['env']}") == f"a [REDACTED:api-key] b [REDACTED:env:{ENV_NAME}]"


def test_keys_of_a_structure_are_redacted_and_keys_that_are_no_text_are_kept():
    keys = fake_keys()
    redactor = Redactor()
    assert redactor.value({keys["openai-key"]: 1, 5: keys["jwt"], None: "x"}) == {
        "[REDACTED:openai-key]": 1, 5: "[REDACTED:jwt]", None: "x"}
    assert redactor.value((keys["jwt"], 2.5, None, True)) == ["[REDACTED:jwt]", 2.5, None, True]
    assert redactor.text("") == ""


def test_a_redacted_record_line_holds_any_value_in_its_json_form():
    record = recs.MessageRecord(seq=0, turn=1, tokens=1, message={"role": "tool", "content": b"caf\xc3\xa9"})
    line = redaction.dumps(record, Redactor())
    assert json.loads(line)["message"] == {"role": "tool", "content": "café"} and '"café"' in line


@pytest.mark.parametrize("prefilter", [True, False])
def test_found_and_scan_file_tell_whether_there_is_a_secret(tmp_path, prefilter):
    keys = fake_keys()
    redactor = Redactor(prefilter=prefilter)
    assert redactor.found(f"x {keys['github-token']} y") and not redactor.found("nothing to see")
    clean = tmp_path / "clean.out"
    clean.write_bytes(b"nothing to see here\n" * (CHUNK_BYTES // 10))  # two chunks and more
    assert redactor.scan_file(clean) is False
    straddling = tmp_path / "straddling.out"  # a key across the first chunk's end: found through the overlap
    straddling.write_bytes(b"a" * (CHUNK_BYTES - 20) + f" {keys['openai-key']} ".encode() + b"b" * 100)
    assert redactor.scan_file(straddling) is True


def test_the_store_passes_the_suffix_on_however_it_is_given(tmp_path):
    keys = fake_keys()
    store = RedactingStore(tmp_path / "s" / "outputs")
    raw = b"\x93NUMPY " + keys["openai-key"].encode()  # a key a redaction would replace
    assert store.put_bytes("@a", raw, ".npy") == store.root / "a.npy" and (store.root / "a.npy").read_bytes() == raw
    assert store.put_bytes("@b", raw, suffix=".npy").read_bytes() == raw
    assert store.put_bytes("@c", b"{}", suffix=".json", durable=False) == store.root / "c.json"
    source = tmp_path / "src.txt"
    source.write_text(keys["slack-token"])
    assert store.put_file("@d", source, ".json") == store.root / "d.json"
    assert store.put_file("@e", source, suffix=".json") == store.root / "e.json"
    assert (store.root / "e.json").read_bytes() == b"[REDACTED:slack-token]"


def test_environment_secrets_are_values_of_eight_characters_or_more_under_names_that_say_so():
    environ = {"A_TOKEN": "12345678", "SHORT_KEY": "1234567", "PLAIN": "abcdefghijkl", "API_KEY_FILE": "/etc/k/x.pem",
               "db_password": "  hunter2hunter2  ", "B_SECRET": "12345678"}
    assert redaction.env_secrets(environ) == {"12345678": "A_TOKEN", "hunter2hunter2": "db_password"}
    exact = Redactor({"12345678": "eight", "1234567": "seven"})  # exact values: 8 characters or more too
    assert exact.text("a 12345678 b 1234567") == "a [REDACTED:eight] b 1234567"
    # found one character into another anchor ("gh", a GitHub token's start, that matches nothing here)
    glued = Redactor({"hunter2hunter2": "pw"})
    assert glued.text("ghunter2hunter2") == "g[REDACTED:pw]" and glued.data(b"ghunter2hunter2") == b"g[REDACTED:pw]"


def test_exact_values_nested_long_and_undecodable_are_redacted_whole(monkeypatch):
    """An exact value that extends another is replaced whole (the longest is tried first); one longer
    than the context read after a prefilter window (256 bytes) is still found through the prefilter;
    and an environment value with an undecodable byte (a lone surrogate in ``os.environ``) is matched
    as that byte."""
    nested = Redactor({"hunter2hunter2": "short", "hunter2hunter2-and-more": "long"})
    assert nested.text("x hunter2hunter2-and-more y") == "x [REDACTED:long] y"
    assert nested.data(b"x hunter2hunter2-and-more y") == b"x [REDACTED:long] y"
    odd = Redactor.from_env({"A_TOKEN": "s3cret-\udcff-value"})
    assert odd.data(b"x s3cret-\xff-value y") == b"x [REDACTED:env:A_TOKEN] y"
    monkeypatch.setattr(redaction, "FAST_MIN_BYTES", 0)  # the prefilter for every size
    long_value = "".join(random.Random(3).choice(ALNUM) for _ in range(400))
    long = Redactor({long_value: "long"})
    assert long.prefilter is not None
    assert long.data(f"a {long_value} b".encode()) == b"a [REDACTED:long] b"


def test_copy_file_says_whether_any_chunk_changed(tmp_path):
    keys = fake_keys()
    for prefilter in (True, False):
        redactor = Redactor(prefilter=prefilter)
        clean, early = tmp_path / "clean.out", tmp_path / "early.out"
        clean.write_bytes(b"nothing here\n" * (CHUNK_BYTES // 6))  # two chunks and more
        early.write_bytes(f"{keys['openai-key']}\n".encode() + clean.read_bytes())  # in the first chunk only
        assert redactor.copy_file(clean, tmp_path / "a") is False
        assert (tmp_path / "a").read_bytes() == clean.read_bytes()
        assert redactor.copy_file(early, tmp_path / "b") is True
        assert (tmp_path / "b").read_bytes() == b"[REDACTED:openai-key]\n" + clean.read_bytes()


def test_the_store_uses_its_own_redactor_and_its_linked_stores(tmp_path):
    mine = "my-own-secret-value"
    other = tmp_path / "parent"
    other.mkdir()
    (other / "z.out").write_text("linked")
    store = RedactingStore(tmp_path / "s" / "outputs", Redactor({mine: "mine"}), linked=lambda: [other])
    assert store.find("@z") == other / "z.out"
    assert store.put_bytes("@a", f"x {mine}".encode()).read_bytes() == b"x [REDACTED:mine]"
    fd, spool = store.spool()
    os.write(fd, mine.encode())
    os.close(fd)
    adopted = store.adopt(spool, "@b")
    assert adopted.read_bytes() == b"[REDACTED:mine]" and stat.S_IMODE(adopted.stat().st_mode) == 0o600


def test_adopt_passes_the_suffix_on_and_keeps_npy_exact(tmp_path):
    keys = fake_keys()
    store = RedactingStore(tmp_path / "s" / "outputs")
    raw = b"\x93NUMPY " + keys["openai-key"].encode()
    for handle, args, kwargs in (("@n", (".npy",), {}), ("@m", (), {"suffix": ".npy"})):
        fd, spool = store.spool()
        os.write(fd, raw)
        os.close(fd)
        adopted = store.adopt(spool, handle, *args, **kwargs)
        assert adopted == store.root / f"{handle[1:]}.npy" and adopted.read_bytes() == raw
        assert stat.S_IMODE(adopted.stat().st_mode) == 0o600


def test_a_secret_set_between_spool_and_adopt_is_redacted(tmp_path, monkeypatch):
    """The spool's follower scanned with the patterns of the environment it started in; adopt uses the
    environment's redactor of now, and the follower's windows only when they come from its patterns."""
    monkeypatch.delenv("LATE_TOKEN", raising=False)
    store = RedactingStore(tmp_path / "s" / "outputs")
    late = "zq" + "late-value-" * 3
    fd, spool = store.spool()
    os.write(fd, b"x " * 1000 + f"{late} y".encode())
    os.close(fd)
    monkeypatch.setenv("LATE_TOKEN", late)
    assert store.adopt(spool, "@l").read_bytes() == b"x " * 1000 + b"[REDACTED:env:LATE_TOKEN] y"


def test_a_measurement_of_an_older_size_of_the_file_is_not_used(tmp_path):
    """``redact_file(measured=...)``: a measurement taken before the file grew says nothing of the new bytes."""
    keys = fake_keys()
    redactor = Redactor()
    path = tmp_path / "grown.out"
    path.write_bytes(b"clean so far\n")
    measured = scan.measure(path, redactor.prefilter) if redactor.prefilter is not None else None
    with open(path, "ab") as fh:
        fh.write(f"then {keys['github-token']}\n".encode())
    assert redaction.redact_file(path, redactor, measured)[0] is True
    assert path.read_bytes() == b"clean so far\nthen [REDACTED:github-token]\n"


# ---------------------------------------------------------------- a whole run


def test_no_fake_key_anywhere_under_the_data_dir(tmp_path):
    keys = fake_keys()
    work = tmp_path / "work"
    work.mkdir()
    (work / "secrets.env").write_text(secrets_text(keys), encoding="utf-8")
    filler = "".join(f"row {i:06d} nothing to see here\n" for i in range(20_000))
    (work / "big.log").write_text(f"first {keys['openai-key']}\n{filler}middle {keys['jwt']}\n{filler}"
                                  f"last {keys['github-token']} {keys['env']}\n", encoding="utf-8")
    profile = tmp_path / "p.yaml"
    profile.write_text("permissions: {kinds: {write: allow, exec: allow}}\n", encoding="utf-8")
    model = script(tmp_path / "s.yaml", [
        {"content": f"Using {keys['anthropic-key']} as told.",
         "tool_calls": [call("env", "shell", command=f'echo "token=${ENV_NAME}"; echo {keys["openai-proj"]}'),
                        call("file", "read_file", path="secrets.env"),
                        call("curl", "shell", command=f"echo curl -H 'Authorization: Bearer {keys['bearer-token']}'"),
                        call("big", "shell", command=f"cat big.log; echo {keys['github-pat']}")]},
        {"tool_calls": [call("mid", "grep_output", handle="@big", pattern="^middle"),
                        call("write", "write_file", path="notes.txt", content=f"aws {keys['aws-access-key']}"),
                        call("pem", "shell", command="sed -n '/BEGIN/,/END/p' secrets.env")]},
        {"content": f"Done; the google key was {keys['google-api-key']}."},
    ])
    run_key = "sk-" + keys["openai-key"][:2:-1]  # the key the run itself would use, exactly
    task = (f"Deploy with {keys['slack-token']} and DB_PASSWORD={keys['secret']}; {pem(keys['private-key'])}"
            f"(my key is {run_key})")
    out = ctxagent("run", "--batch", "--session", "leaky", "--model", model, "--profile", str(profile), task,
                   cwd=work, env={ENV_NAME: keys["env"], "OPENAI_API_KEY": run_key})
    assert out.returncode == 0, out.stderr
    data = Path(os.environ["CTXAGENT_DATA_DIR"])
    assert_nowhere(data, {**keys, "run-key": run_key})
    assert all(key not in out.stderr for key in keys.values())  # progress lines are logs too
    (user,) = [r["message"]["content"] for r in records("leaky") if r["kind"] == "message"
               and r["message"]["role"] == "user"]
    assert "(my key is [REDACTED:env:OPENAI_API_KEY])" in user and "[REDACTED:slack-token]" in user
    results = tool_messages("leaky")
    assert all(not text.startswith("ERROR") for text in results.values()), results
    assert "token=\n" in results["env"]  # the shell does not get the credential variable (issue 31)
    assert "Bearer [REDACTED:bearer-token]" in results["curl"]
    assert "[REDACTED:private-key]" in results["pem"]
    preview = results["big"]  # what the model saw of the offloaded output: head and tail
    assert "@big" in preview and "first [REDACTED:openai-key]" in preview
    assert "last [REDACTED:github-token] [REDACTED:env:CI_DEPLOY_TOKEN]" in preview
    assert "middle [REDACTED:jwt]" in results["mid"]
    (output,) = [r for r in records("leaky") if r["kind"] == "output"]
    stored = data / "sessions" / "leaky" / output["path"]
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == output["sha256"]  # the record describes the file
    assert (work / "notes.txt").read_text() == f"aws {keys['aws-access-key']}"  # the user's file: as the model wrote it


def test_owner_only_files(tmp_path):
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("big", "shell", command="seq 1 30000")]},
                                         {"content": "one"}, {"content": "two"}])
    profile = tmp_path / "p.yaml"
    profile.write_text("permissions: {kinds: {exec: allow}}\n", encoding="utf-8")
    assert ctxagent("run", "--batch", "--session", "modes", "--model", model, "--profile", str(profile),
                    "q").returncode == 0
    root = Path(os.environ["CTXAGENT_DATA_DIR"])
    with open(root / "sessions" / "modes" / "transcript.jsonl", "ab") as fh:
        fh.write(b'{"kind":"mess')  # a torn line, set aside on resume
    assert ctxagent("resume", "--batch", "--session", "modes", "again").returncode == 0
    for path in [root, root / "sessions", *root.rglob("*")]:
        expected = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.stat().st_mode) == expected, path
    assert (root / "sessions" / "modes" / "transcript.torn-1.jsonl").exists()
    assert [p for p in root.rglob("*") if p.is_file() and "big" in p.name]  # the offloaded output is among them


# ---------------------------------------------------------------- persist and always


def run_recorded(tmp_path: Path, name: str, mode: str, message: str | None, replies: list[Any]) -> list[Any]:
    """Run a session in-process with the scripted model, recording every request it is sent."""
    from ctxagent.agent.config import RunConfig
    from ctxagent.agent.setup import open_runner
    from ctxagent.sessions.session import Session

    profile = tmp_path / f"{mode}.yaml"
    profile.write_text(f"redact: {mode}\npermissions: {{kinds: {{exec: allow}}}}\n", encoding="utf-8")
    model = script(tmp_path / f"{name}-script.yaml", replies)
    sent: list[Any] = []
    session = Session.at(name)
    with session.writer():
        runner = open_runner(session, RunConfig(profile_spec=str(profile), model_spec=model, path="batch",
                             workdir=tmp_path))
        inner = runner.model

        class Recording:
            name = inner.name

            def complete(self, messages: Any, tools: Any) -> Any:
                sent.append(copy.deepcopy(list(messages)))
                return inner.complete(messages, tools)

        runner.model = Recording()
        for _ in runner.run(message):
            pass
    return sent


def test_persist_sends_real_values_this_run_and_redacted_ones_after_resume(tmp_path):
    key = fake_keys()["openai-key"]
    replies = [{"tool_calls": [call("a", "shell", command=f"echo {key}")]}, {"content": "ok"}, {"content": "again"}]
    sent = run_recorded(tmp_path, "persist", "persist", f"use {key}", replies)
    assert key in json.dumps(sent[1])  # this run: the model got the real output (and task)
    assert_nowhere(Path(os.environ["CTXAGENT_DATA_DIR"]), {"k": key})  # the disk never did
    resumed = run_recorded(tmp_path, "persist", "persist", "and now?", replies)
    assert key not in json.dumps(resumed) and "[REDACTED:openai-key]" in json.dumps(resumed)


def test_always_never_sends_a_secret_to_the_model(tmp_path):
    key = fake_keys()["openai-key"]
    replies = [{"tool_calls": [call("a", "shell", command=f"echo {key}")]}, {"content": "ok"}]
    sent = run_recorded(tmp_path, "always", "always", f"use {key}", replies)
    assert len(sent) == 2 and all(key not in json.dumps(request) for request in sent)
    assert "[REDACTED:openai-key]" in sent[1][-1]["content"]


# ---------------------------------------------------------------- litellm never prints keys


def test_a_failing_litellm_call_prints_no_key(tmp_path, fake_openai):
    key = fake_keys()["openai-proj"]
    server = fake_openai([error(401, f"Incorrect API key provided: {key}. Find your key at the dashboard.",
                                code="invalid_api_key")])
    profile = tmp_path / "p.yaml"
    profile.write_text("context_window: 16000\nretries: 0\n", encoding="utf-8")
    out = ctxagent("run", "--batch", "--session", "auth", "--model", "openai/x", "--api-base", server.base_url,
                   "--profile", str(profile), "hi", env={"OPENAI_API_KEY": key, "LITELLM_LOG": "DEBUG"})
    assert out.returncode == 4, out.stderr
    assert "authentication failed" in out.stderr
    assert key not in out.stdout and key not in out.stderr
    assert key[8:30] not in out.stdout + out.stderr
    assert_nowhere(Path(os.environ["CTXAGENT_DATA_DIR"]), {"k": key})
    (sent,) = server.requests
    assert sent["messages"][-1]["content"] == "hi"  # the key went where it belongs: the Authorization header
