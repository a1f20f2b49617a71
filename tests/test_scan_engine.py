"""The hyperscan prefilter changes how fast secrets are found, never what is redacted (issue 18).

The property: for random text with secrets (and near misses) planted at random offsets, including
across the chunk boundaries of a file, the prefiltered scan (``Redactor()``) redacts exactly what
the Python patterns tried everywhere (``Redactor(prefilter=False)``, the path before issue 18 and
the fallback without hyperscan) redact, byte for byte, in memory and in files; and the stats the
scan hands to the output record are the file's. Fake keys are composed at run time (no key-looking
literal is committed).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import random
import string
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxagent.sessions.redact import RedactingStore, Redactor, scan
from ctxagent.sessions.redact import redactor as redaction
from ctxagent.sessions.redact.engine import Engine, Windows, _buffers
from ctxagent.sessions.redact.rules import PREFILTERS
from ctxagent.sessions.store import OutputStore
from ctxagent.tools.preview import FileStats
from examplecount import examples

pytest.importorskip("hyperscan", reason="the prefilter needs the hyperscan wheel (the fallback is tested below)")


def file_stats(path: Path) -> FileStats:
    """The stats of ``path`` read whole: the independent check of what the scans measure."""
    data = path.read_bytes()
    return FileStats(len(data), data.count(b"\n") + (data[-1:] not in (b"", b"\n")), hashlib.sha256(data).hexdigest())

ALNUM = string.ascii_letters + string.digits
EXACT = "q9-" + "Zr" * 6 + "-env"  # an environment secret of no particular shape


def _chars(rnd: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rnd.choice(alphabet) for _ in range(n))


def _secret(rnd: random.Random) -> str:
    """A secret of some shape, a near miss, or a fragment that only some contexts complete."""
    c = lambda n, a=ALNUM: _chars(rnd, n, a)  # noqa: E731
    pem = "-----BEGIN RSA " + "PRIVATE KEY-----\n" + c(64, ALNUM + "+/") + "\n"
    return rnd.choice([
        "sk-" + c(rnd.randint(15, 60), ALNUM + "_-"), "sk-" + "ant-" + c(40), "sk-" + "proj-" + c(30),
        "AK" + "IA" + c(16, string.ascii_uppercase + string.digits), "AS" + "IA" + c(rnd.randint(14, 18)),
        "gh" + "p_" + c(rnd.randint(28, 40)), "github" + "_pat_" + c(30), "AI" + "za" + c(rnd.randint(33, 37)),
        "xo" + "xb-" + c(12, string.digits) + "-" + c(10), "ey" + "J" + c(12) + ".ey" + "J" + c(12) + "." + c(9),
        "ey" + "J" + c(9), "Authorization: Bearer " + c(30), "authorization=\\\"token " + c(12),
        "bearer " + c(rnd.randint(10, 20)), "x-api-key: " + c(20), "token: expired", "'token': config_count",
        "Cookie: sid=" + c(20), "https://" + c(5) + ":" + c(8) + "@host/x", "ftp://" + c(20) + "@h",
        "https://h/p?api_key=" + c(12) + "&x=1", "?sig=" + c(5), "DB_PASSWORD=" + c(14),
        'API_KEY = "' + c(20) + '"', "KEY=" + c(6), "PASSWORD=[REDACTED:secret]", pem,
        pem + "-----END RSA " + "PRIVATE KEY-----\n", EXACT, '"' + EXACT + '"', "-----BEGIN", "://", "&", "?",
        '"pass' + 'word": "' + c(rnd.randint(3, 12)) + '"', "Passwd=" + c(9, ALNUM + "!@#"), "password = get_x()",
        "mysql -u root -p" + c(rnd.randint(2, 9)) + " db", "mariadb -p " + c(5), "passw", "mysql",
        # issue 31: quoted values of any characters, names of any case, more formats, values that fail a check
        '"Old' + 'Password": "' + c(rnd.randint(3, 14), ALNUM + ";]{}~ ") + '"', "client_" + "secret: " + c(20),
        '"access_' + 'token": "' + c(rnd.randint(6, 30)) + '"', "aws_secret_access_" + "key = " + c(40, ALNUM + "+/"),
        "token-efficient-2025: 1.25e-05", '"NextToken": "' + c(24) + '"', "secretsmanager:us-east-1",
        "gl" + "pat-" + c(20), "sk" + "_live_" + c(24), "hf" + "_" + c(34, string.ascii_letters), "np" + "m_" + c(36),
        "S" + "G." + c(22) + "." + c(43), "AK" + "IA" + c(9, string.ascii_uppercase) + "EXAMPLE",
        "apiKey: ${" + c(8) + "}", '"password": "' + c(6, "0123456789") + '"',
    ])


FILLER = ALNUM + " \n\t:=/-_.?&@'\"\\"


@st.composite
def texts(draw: st.DrawFn, size: int, boundaries: tuple[int, ...]) -> bytes:
    """About ``size`` bytes of filler with secrets planted at random offsets and around
    ``boundaries`` (where a chunked scan splits the text)."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    text = bytearray(_chars(rnd, size, FILLER).encode())
    spots = draw(st.lists(st.one_of(st.integers(0, size), st.sampled_from(boundaries).flatmap(
        lambda b: st.integers(max(0, b - 80), b + 20))), max_size=12))
    for spot in sorted(spots, reverse=True):
        text[spot:spot] = _secret(rnd).encode()
    if draw(st.booleans()):
        text += b"\xff\xfe caf\xc3\xa9 \x00"  # not UTF-8, not text: bytes are redacted all the same
    return bytes(text)


def _pair() -> tuple[Redactor, Redactor]:
    exact = {EXACT: "env:CI_DEPLOY_TOKEN"}
    old, new = Redactor(exact, prefilter=False), Redactor(exact)
    assert old.prefilter is None and new.prefilter is not None
    return old, new


@settings(max_examples=examples(80), deadline=None)
@given(texts(3000, (1000, 2000)))
def test_in_memory_the_prefilter_redacts_exactly_what_the_patterns_do(blob):
    old, new = _pair()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(redaction, "FAST_MIN_BYTES", 0)  # the prefilter for every size
        assert new.data(blob) == old.data(blob)


CHUNK, OVERLAP = 4096, 1024  # small chunks: many boundaries in a small file (same for old and new)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts(3 * CHUNK, (CHUNK - OVERLAP, CHUNK, 2 * CHUNK - OVERLAP, 2 * CHUNK, 3 * CHUNK - OVERLAP)))
def test_in_files_the_prefilter_redacts_exactly_what_the_patterns_do(tmp_path, blob):
    old, new = _pair()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(redaction, "CHUNK_BYTES", CHUNK)
        mp.setattr(redaction, "OVERLAP_BYTES", OVERLAP)
        mp.setattr(scan, "CHUNK_BYTES", 1000)  # the prefilter's stream reads other boundaries again
        before, after = tmp_path / "old.out", tmp_path / "new.out"
        before.write_bytes(blob)
        after.write_bytes(blob)
        redaction.redact_file(before, old)
        stats = redaction.redact_file(after, new)[1]
        assert after.read_bytes() == before.read_bytes()
        assert stats == file_stats(after)  # what the scan measured is what is there
        source, copy = tmp_path / "source.out", tmp_path / "copy.out"
        source.write_bytes(blob)
        new.copy_file(source, copy)
        assert copy.read_bytes() == before.read_bytes()


def _planted(size: int, seed: int = 5) -> bytes:
    rnd = random.Random(seed)
    out = bytearray(_chars(rnd, size, FILLER).encode())
    chunk, overlap = redaction.CHUNK_BYTES, redaction.OVERLAP_BYTES
    for spot in (0, size // 3, chunk - 30, chunk - overlap - 10, size - 40):
        out[spot:spot] = f" {_secret(rnd)} ".encode()
    return bytes(out)


def test_a_spool_file_is_scanned_while_written_and_adopted_redacted(tmp_path):
    """The follower reads the spool as the writer appends to it; adopt uses what it measured."""
    old, new = _pair()
    blob = _planted(2 * redaction.CHUNK_BYTES + 777)
    store = RedactingStore(tmp_path / "outputs", new)
    fd, spooled = store.spool()

    def write() -> None:
        for start in range(0, len(blob), 100_003):
            os.write(fd, blob[start:start + 100_003])
        os.close(fd)

    writer = threading.Thread(target=write)
    writer.start()
    writer.join()
    path, stats = store.adopt_measured(spooled, "@big")
    assert path.read_bytes() == old.data(blob) != blob
    assert stats == file_stats(path)  # measured by the scans, not read again
    assert not [t for t in threading.enumerate() if t.name == "ctxagent-scan"]


def _spooled(tmp_path, data):
    """A redacting store, a spool file holding ``data``, and the scan follower watching it."""
    store = RedactingStore(tmp_path / "outputs", Redactor())
    fd, spooled = store.spool()
    os.write(fd, data)
    os.close(fd)
    return store, spooled, store._followers[spooled]


def test_deleted_and_numpy_spools_stop_their_follower(tmp_path):
    store, spooled, follower = _spooled(tmp_path, b"small output\n")
    spooled.unlink()  # a small output goes inline: its spool is deleted
    follower._thread.join(5)
    assert not follower.alive and follower.finish() is None
    fd, npy = store.spool()
    os.write(fd, b"\x93NUMPY" + b"sk-" + b"A" * 30)
    os.close(fd)
    assert store.adopt(npy, "@arr", ".npy").read_bytes().endswith(b"A" * 30)  # arrays are not text


def test_stored_outputs_leave_no_follower_thread_behind(tmp_path):
    """Regression: put_bytes wrote through spool(), so every stored output started a follower that
    polled the renamed file for a minute: ~800 threads in a quick benchmark run, 80% system time."""
    store = RedactingStore(tmp_path / "outputs", Redactor())
    before = {t for t in threading.enumerate() if t.name == "ctxagent-scan"}
    for i in range(20):
        store.put_bytes(f"@b{i}", b"some output\n")
    source = tmp_path / "src.txt"
    source.write_bytes(b"a file\n")
    store.put_file("@f", source)
    assert {t for t in threading.enumerate() if t.name == "ctxagent-scan"} <= before


def test_a_spool_renamed_away_stops_its_follower(tmp_path):
    _, spooled, follower = _spooled(tmp_path, b"output\n")
    os.replace(spooled, tmp_path / "elsewhere")  # nlink stays 1: only the name tells
    follower._thread.join(5)
    assert not follower.alive and follower.finish() is None


def test_too_many_prefilter_matches_fall_back_to_the_patterns_everywhere(tmp_path, monkeypatch):
    """More prefilter windows than MAX_WINDOWS: the scan lists none (None) and the patterns are tried
    everywhere, in memory (``Redactor.data``) and in files (``secret_windows``, ``redact_file``).

    Regression (issue 17, mutation testing): this test's data had exactly MAX_WINDOWS (2) windows, so it
    never reached that path, and a ``data()`` that returned such "dense" data unredacted passed it. The
    limits are patched (shipped: 256 KiB, 200,000 windows) so a few KiB are dense."""
    old, new = _pair()
    rnd = random.Random(7)
    keys = ["sk-" + _chars(rnd, 30), "gh" + "p_" + _chars(rnd, 36), "AK" + "IA" + "Q" * 16, EXACT,
            "sk-" + _chars(rnd, 40)]
    blob = b"".join(_chars(rnd, 500, FILLER).encode() + f" {key} ".encode() for key in keys)
    monkeypatch.setattr(scan, "MAX_WINDOWS", 2)
    monkeypatch.setattr(redaction, "FAST_MIN_BYTES", 0)
    assert new.prefilter.windows(blob) is None  # dense: the path under test
    expected = old.data(blob)
    assert expected != blob and not any(key.encode() in expected for key in keys)
    assert new.data(blob) == expected
    path = tmp_path / "dense.out"
    path.write_bytes(blob)
    assert scan.measure(path, new.prefilter).windows is None
    assert new.secret_windows(path) == (True, None)
    assert redaction.redact_file(path, new)[0] and path.read_bytes() == expected


def test_without_hyperscan_the_patterns_scan_everything(tmp_path, monkeypatch):
    """The fallback: no wheel (the import fails) or CTXAGENT_SCAN=python."""
    blob = _planted(redaction.CHUNK_BYTES + 5000)
    expected = Redactor(prefilter=False).data(blob)
    monkeypatch.setitem(sys.modules, "hyperscan", None)  # import hyperscan raises ImportError
    redactor = Redactor()
    assert redactor.prefilter is None
    path = tmp_path / "out"
    path.write_bytes(blob)
    assert redaction.redact_file(path, redactor)[0] and path.read_bytes() == expected
    monkeypatch.delitem(sys.modules, "hyperscan")
    monkeypatch.setenv(scan.ENGINE_ENV, "python")
    assert Redactor().prefilter is None
    store = RedactingStore(tmp_path / "outputs")
    fd, spooled = store.spool()
    os.write(fd, blob)
    os.close(fd)
    assert not store._followers and store.adopt(spooled, "@x").read_bytes() == expected


def test_every_prefilter_is_bounded_or_says_its_width():
    pre = scan.prefilter(())
    assert pre is not None and len(pre.widths) == len(PREFILTERS)
    assert all(0 < width <= 4100 for width in pre.widths)
    with pytest.raises(ValueError, match="unbounded"):
        scan._max_width("eyJ[a-z]+")


def test_the_store_returns_the_stats_its_scans_measured_of_the_file_it_adopted(tmp_path):
    """Issue 35: the stats went from the store's scan to the output record through a module-wide
    table; the store returns them with the file. Clean, with a secret, and not scanned (an array)."""
    store = RedactingStore(tmp_path / "outputs", Redactor({"hunter2-secret-value": "mine"}))
    for handle, data, suffix in (("@a", b"one\ntwo", ".out"), ("@b", b"x hunter2-secret-value y\n" * 3, ".out"),
                                 ("@c", b"\x93NUMPY hunter2-secret-value", ".npy")):
        fd, spooled = store.spool()
        os.write(fd, data)
        os.close(fd)
        path, stats = store.adopt_measured(spooled, handle, suffix)
        scanned = handle == "@b" or (handle == "@a" and store.redactor.prefilter is not None)
        assert stats == (file_stats(path) if scanned else None), handle
    assert b"hunter2" not in (tmp_path / "outputs" / "b.out").read_bytes()
    plain = OutputStore(tmp_path / "outputs")  # a store that scans nothing measures nothing
    assert plain.adopt_measured(tmp_path / "outputs" / "a.out", "@d") == (tmp_path / "outputs" / "d.out", None)


# --- the scan's pieces, stated exactly (issue 17: mutation testing) ------------------------------


def test_a_window_runs_from_the_prefilters_width_before_its_match_end_and_not_before_the_start():
    pre = scan.prefilter((b"ZZ(sec\x00ret)",))  # an exact value with a NUL and regex syntax, matched as bytes
    assert list(pre.windows(b"xxxxZZ(sec\x00ret)yy")) == [(4, 15)]  # its width is its length (11)
    assert list(pre.windows(b"xxxxZZsecretyy")) == []
    # "-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY" is 62 wide: a match ending at 22 opens the window at 0
    assert list(pre.windows(b"-----BEGIN PRIVATE KEY and more")) == [(0, 22)]
    assert list(pre.windows(b"." * 100 + b"-----BEGIN PRIVATE KEY")) == [(60, 122)]


def test_only_the_prefilters_marked_i_ignore_case():
    pre = scan.prefilter(())
    assert list(pre.windows(b"BEARER " + b"a" * 16)) == [(0, 23)]  # ("i", "bearer...")
    assert list(pre.windows(b"SK-" + b"a" * 20)) == []  # ("", "sk-...")
    assert list(pre.windows(b"sk-" + b"a" * 20)) == [(0, 23)]
    exact = scan.Prefilter((b"ZZsecretZZ",))  # an exact value is matched in its own case only
    assert list(exact.windows(b"ZZsecretZZ")) == [(0, 10)] and list(exact.windows(b"zzSECRETzz")) == []


def test_the_python_engine_setting_ignores_case(monkeypatch):
    monkeypatch.setenv(scan.ENGINE_ENV, "Python")
    assert scan.prefilter(()) is None
    monkeypatch.setenv(scan.ENGINE_ENV, "hyperscan")
    assert scan.prefilter(()) is not None


def test_an_exact_value_over_4000_bytes_has_no_prefilter_and_is_still_redacted(monkeypatch):
    """Each byte of an exact value is escaped (``\\xNN``, 4 characters), and hyperscan refuses a pattern
    over 16,000 characters: a value over 4,000 bytes (a long PEM key in the environment) makes the database
    fail to compile. ``prefilter()`` then warns once where it was called and returns None; the redactor
    falls back to the Python patterns everywhere."""
    value = "".join(random.Random(4001).choice(string.ascii_letters) for _ in range(4001))
    with pytest.warns(RuntimeWarning, match=r"secret scan without its prefilter \(slower\): ") as caught:
        assert scan.prefilter((value.encode(),)) is None
    # stacklevel=2: the caller's line, not scan.py's nor the caller's caller's (under mutmut, the two frames
    # above prefilter() are both in its trampoline)
    caller = "trampoline.py" if hasattr(scan, "x_prefilter__mutmut_orig") else "test_scan_engine.py"
    assert [os.path.basename(w.filename) for w in caught] == [caller]
    monkeypatch.setattr(redaction, "FAST_MIN_BYTES", 0)
    with pytest.warns(RuntimeWarning):
        assert Redactor({value: "pem"}).data(f"a {value} b".encode()) == b"a [REDACTED:pem] b"


def test_the_width_of_a_bounded_pattern_is_its_longest_match():
    assert scan._max_width("ab[0-9]{2,5}") == 7
    with pytest.raises(ValueError, match=r"prefilter 'x\+' is unbounded: give its width"):
        scan._max_width("x+")
    # a width of MAXREPEAT itself counts as unbounded: it is what an unbounded pattern measures where the
    # parser caps widths at MAXREPEAT (this Python reports 2**64 for "x+")
    maxrepeat = int(importlib.import_module("re._parser").MAXREPEAT)
    with pytest.raises(ValueError, match="unbounded"):
        scan._max_width(f"x{{0,{maxrepeat - 1}}}y")


def test_at_most_max_windows_are_listed_then_the_scan_says_scan_everything(monkeypatch):
    monkeypatch.setattr(scan, "MAX_WINDOWS", 2)
    pre = scan.prefilter(())
    two = b"sk-" + b"a" * 20 + b" " * 100 + b"sk-" + b"b" * 20
    assert list(pre.windows(two)) == [(0, 23), (123, 146)]
    assert pre.windows(two + b" " * 100 + b"sk-" + b"c" * 20) is None


class _Started:
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.result: object = None


def _threads_started(call):
    """``call()``'s result and the names of the threads started meanwhile (``threading.settrace``
    runs its hook first thing in each new thread)."""
    started = _Started()

    def hook(frame, event, arg):
        started.names.add(threading.current_thread().name)

    threading.settrace(hook)
    try:
        started.result = call()
    finally:
        threading.settrace(None)
    return started


@pytest.mark.parametrize("data, lines", [(b"", 0), (b"\n", 1), (b"a", 1), (b"a\nb", 2), (b"a\nb\n", 2)])
def test_measure_counts_a_last_line_without_newline(tmp_path, data, lines):
    path = tmp_path / "f.out"
    path.write_bytes(data)
    measured = scan.measure(path)
    assert measured.stats == file_stats(path) and measured.stats.lines == lines and measured.windows is None


def test_measure_in_several_chunks_hashed_in_a_thread_finds_the_windows_of_the_whole_file(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "CHUNK_BYTES", 10)
    data = b"line one\n" * 3 + b"x sk-" + b"a" * 20 + b"\nend"  # the key across chunk boundaries
    pre = scan.prefilter(())
    monkeypatch.setattr(scan, "THREAD_MIN_BYTES", len(data))
    for size in (len(data), len(data) - 1):  # from THREAD_MIN_BYTES on, the hash runs in a thread
        path = tmp_path / f"f{size}.out"
        path.write_bytes(data[:size])
        started = _threads_started(lambda p=path: scan.measure(p, pre))
        assert started.result.stats == file_stats(path)
        assert [n.startswith("ctxagent-sha256") for n in started.names] == ([True] if size == len(data) else [])
        assert not [t for t in threading.enumerate() if t.name.startswith("ctxagent-sha256")]
    assert list(scan.measure(tmp_path / f"f{len(data)}.out", pre).windows) == [(29, 52)]


def test_a_digester_skips_empty_chunks_and_counts_the_last_line(tmp_path):
    digester = scan.Digester()
    for chunk in (b"one\ntw", b"", b"o"):
        digester.update(chunk)
    path = tmp_path / "f"
    path.write_bytes(b"one\ntwo")
    assert digester.stats() == file_stats(path) and file_stats(path).lines == 2
    threaded = scan.Digester(threaded=True)
    threaded.update(b"one\ntwo")
    assert threaded.stats() == file_stats(path)
    # the hash runs in the calling thread by default, in a second one when asked
    def digest(**kwargs):
        digester = scan.Digester(**kwargs)
        digester.update(b"x")
        return digester.stats()

    assert _threads_started(digest).names == set()
    assert [n.startswith("ctxagent-sha256") for n in _threads_started(lambda: digest(threaded=True)).names] == [True]


def test_a_follower_measures_what_measure_does_and_a_cancelled_one_gives_nothing(tmp_path):
    pre = scan.prefilter(())
    path = tmp_path / "spool"
    path.write_bytes(b"a\nsk-" + b"a" * 20)
    follower = scan.Follower(path, pre)
    assert follower.alive and follower._thread.daemon and follower._thread.name == "ctxagent-scan"
    time.sleep(0.05)  # it caught up and polls: it asks whether the spool is still named so
    result = follower.finish()
    again = scan.measure(path, pre)
    assert result.stats == again.stats == file_stats(path) and not follower.alive
    assert list(result.windows) == list(again.windows) == [(2, 25)]
    cancelled = scan.Follower(path, pre)
    cancelled.cancel()
    assert not cancelled.alive and cancelled.finish() is None


def test_a_follower_hashes_in_a_second_thread(tmp_path):
    path = tmp_path / "spool"
    path.write_bytes(b"some output\n")
    started = _threads_started(lambda: scan.Follower(path, scan.prefilter(())).finish())
    assert started.result.stats == file_stats(path)
    assert "ctxagent-scan" in started.names and any(n.startswith("ctxagent-sha256") for n in started.names)


class _FailingScan(scan.Prefilter):
    """A prefilter whose scan fails mid-stream (as a hyperscan error would)."""

    @contextmanager
    def stream(self, hits):
        def fail(chunk):
            raise RuntimeError("scan failed")

        yield fail


def test_a_follower_whose_scan_fails_gives_nothing_and_leaves_no_hashing_thread(tmp_path):
    path = tmp_path / "spool"
    path.write_bytes(b"some output\n")
    follower = scan.Follower(path, _FailingScan(()))
    follower._thread.join(5)
    assert not [t for t in threading.enumerate() if t.name.startswith("ctxagent-sha256")]
    assert follower.finish() is None


def test_a_follower_gives_up_after_idle_give_up_s_without_new_bytes_and_not_before(tmp_path, monkeypatch):
    """Counted from the last new bytes, for an empty file as for one read already (0.75 s here, not 60: room
    for this thread to be descheduled between starting the followers and looking, on a busy machine)."""
    monkeypatch.setattr(scan, "IDLE_GIVE_UP_S", 0.75)
    pre = scan.prefilter(())
    followers = []
    for name, data in (("empty", b""), ("read", b"some output\n")):
        path = tmp_path / name
        path.write_bytes(data)
        followers.append(scan.Follower(path, pre))
    time.sleep(0.08)  # idle for less than 0.75 s: both still follow (the wait counted is at most the time)
    assert all(f.alive for f in followers)
    for follower in followers:
        follower._thread.join(5)
        assert not follower.alive and follower.finish() is None


# --- the engine's file search, stated exactly (issue 17: mutation testing) --------------------

KEY = "sk-" + "A" * 30  # an openai-key shape: `\bsk-`, so not after a letter (unless nothing is before it)


def _windows(*pairs):
    windows = Windows()
    for start, end in pairs:
        windows.add(start, end)
    return windows.finish()


def _file(tmp_path, text: str):
    path = tmp_path / "f.out"
    path.write_bytes(text.encode())
    return path


def test_found_in_file_looks_only_at_candidates_inside_the_windows(tmp_path):
    engine = Engine({}, as_bytes=True)
    path = _file(tmp_path, "." * 100 + KEY + "." * 100)
    assert engine.found_in_file(path, _windows((100, 101)), 4096, 1024) is True
    assert engine.found_in_file(path, _windows((90, 100)), 4096, 1024) is False  # a window's end is not in it
    assert engine.found_in_file(path, _windows(), 4096, 1024) is False
    near = _file(tmp_path, "." * 100 + "sk-short" + "." * 100)  # a candidate, but no match
    assert engine.found_in_file(near, _windows((100, 101)), 4096, 1024) is False
    # a candidate before the window (in the context read with it) does not stop the search
    before = _file(tmp_path, "." * 60 + "sk-x" + "." * 36 + KEY + "." * 100)
    assert engine.found_in_file(before, _windows((80, 101)), 4096, 1024) is True


def test_a_chunked_copy_sees_the_text_before_its_buffer_as_a_whole_text_scan_does(tmp_path, monkeypatch):
    """chunk 100, overlap 40, 300 bytes: the copy tries [0, 60) in [0, 100), [60, 160) in [60, 200),
    [160, 260) in [160, 300). A buffer's start had no text before it, so ``x`` + KEY with KEY at 160 was
    a key there (``\\b`` held) and was replaced, while at 120, or in the whole text, it is not one. Each
    buffer now keeps BEFORE_BYTES of context: the copy and found_in_file agree with the whole text."""
    engine = Engine({}, as_bytes=True)
    assert list(_buffers(300, 100, 40)) == [(0, 60, 100), (60, 160, 200), (160, 260, 300), (260, 300, 300)]
    monkeypatch.setattr(redaction, "CHUNK_BYTES", 100)
    monkeypatch.setattr(redaction, "OVERLAP_BYTES", 40)
    for at, sep in ((160, "x"), (120, "x"), (160, " "), (120, " ")):
        text = "." * (at - 1) + sep + KEY
        path = _file(tmp_path, text + "." * (300 - len(text)))
        whole = engine.sub(path.read_bytes())[0] != path.read_bytes()
        assert whole is (sep == " ")
        assert engine.found_in_file(path, _windows((at, at + 1)), 100, 40) is whole
        assert Redactor(prefilter=False).copy_file(path, tmp_path / "copy.out") is whole


def test_a_next_token_cut_by_a_chunk_boundary_is_kept(tmp_path, monkeypatch):
    """``"NextToken": "..."`` (a paging cursor in AWS's data files) is no secret; a chunked copy whose
    buffer began at ``Token`` could not see ``Next`` before it and replaced the cursor (found by the
    property test above with hypothesis)."""
    monkeypatch.setattr(redaction, "CHUNK_BYTES", 100)
    monkeypatch.setattr(redaction, "OVERLAP_BYTES", 40)
    for at in range(50, 70):  # "Token" starts at buffer starts 60 (and near them)
        text = "." * (at - 5) + '"NextToken": "6CTUsONIjZK3b8le0ip0E9Wa"'
        path = _file(tmp_path, text + "." * (300 - len(text)))
        assert Redactor(prefilter=False).copy_file(path, tmp_path / "copy.out") is False, at
        assert (tmp_path / "copy.out").read_bytes() == path.read_bytes()


def test_windows_merge_sort_and_list_those_overlapping_a_range():
    windows = Windows()
    for start, end in ((40, 50), (0, 10), (20, 30), (8, 12), (45, 47), (50, 52)):
        windows.add(start, end)
    assert list(windows.finish()) == [(0, 12), (20, 30), (40, 52)] and len(windows) == 3  # touching ones merge
    in_order = Windows()
    for start, end in ((0, 10), (10, 20), (21, 30)):
        in_order.add(start, end)
    assert list(in_order) == [(0, 20), (21, 30)]
    assert list(windows.within(25, 45)) == [(20, 30), (40, 52)]
    assert list(windows.within(30, 40)) == []  # [start, end): (20, 30) ends where the range starts
    assert list(windows.within(12, 21)) == [(20, 30)]


def test_windowed_candidates_are_absolute_and_inside_the_windows():
    engine = Engine({}, as_bytes=True)
    buf = ("." * 100 + KEY + "." * 20 + KEY).encode()
    assert engine.windowed(buf, _windows((100, 101))) == [100]  # buf starts at 0 by default
    assert engine.windowed(buf[50:], _windows((100, 101)), 50) == [50]  # at 50: window 100 is buf[50]
    assert engine.windowed(buf, _windows((90, 100), (101, 140))) == []
    assert engine.windowed(buf, _windows((0, len(buf)))) == [100, 153]


def test_each_thread_has_its_own_scratch_space_kept_for_its_scans():
    """A hyperscan scratch space serves one scan at a time: the follower's thread and the caller's
    must not share one; a thread reuses its own."""
    pre = scan.Prefilter(())
    mine = pre.scratch()
    assert mine is not None and pre.scratch() is mine
    other = []
    thread = threading.Thread(target=lambda: other.append(pre.scratch()))
    thread.start()
    thread.join()
    assert other[0] is not None and other[0] is not mine


def test_a_quoted_value_of_any_characters_is_seen_by_the_prefilter(monkeypatch):
    """Regression (issue 31, while writing it): a value in quotes runs to its closing quote whatever it
    holds (``"OldPassword": "3s0K_;xh4~8XXI"``), but the prefilters still asked for a bare value's
    characters after the name, so the prefiltered scan left ``]35d/{pB9`` and ``h]6Esz`` where the
    patterns alone replaced them."""
    monkeypatch.setattr(redaction, "FAST_MIN_BYTES", 0)  # the prefilter for every size
    rnd = random.Random(31)
    for first in ";]}~#":
        value = first + _chars(rnd, 11, ALNUM + ";]{}~")
        for text in (f'{{"OldPassword": "{value}"}}', f"DB_PASSWORD='{value}'", f'"client_secret": "{value}xyz"'):
            data = f"{'x' * 300}\n{text}\n".encode()
            assert Redactor().data(data) == Redactor(prefilter=False).data(data) != data, text
