"""Sessions in an object store (``--store`` / ``CTXAGENT_STORE``): a real S3 API (moto in server
mode on 127.0.0.1, one per test session, a bucket per test) and the real CLI in subprocesses. Each
"machine" is a fresh data dir (the store's cache) and its own ``CTXAGENT_HOST``."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clihelp import call, ctxagent, result_of, run_cli, script
from ctxagent.errors import SessionBusyError
from ctxagent.sessions.session import Session

# found, not imported: s3fs and moto cost ~1.5 s to import, in every xdist worker that collects this file
if importlib.util.find_spec("s3fs") is None:
    pytest.skip("the s3 extra (s3fs) is not installed", allow_module_level=True)
if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
    pytest.skip("moto[server] is not installed", allow_module_level=True)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (a free port) for the whole test session."""
    from moto import server as moto_server
    from s3fs import S3FileSystem

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    # fsspec caches filesystems by their arguments (and process): one made for an earlier server (an earlier
    # pytest session in this process, as mutmut runs them) would still call that server's port. Once per
    # server, not per test: a new filesystem is a new botocore session, which parses botocore's endpoint
    # and S3 model files again (~0.1 s of CPU each time); the tests' buckets are their own anyway.
    S3FileSystem.clear_instance_cache()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@dataclass
class Bucket:
    url: str  # the store URL
    name: str
    client: Any  # boto3 S3 client
    root: Path

    def machine(self, name: str, **extra: str) -> dict[str, str]:
        """The environment of another machine: its own cache (data dir) and host name."""
        return {"CTXAGENT_DATA_DIR": str(self.root / name), "CTXAGENT_HOST": name, **extra}

    def objects(self) -> dict[str, bytes]:
        """Every object of the bucket: key -> bytes."""
        found = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name):
            for item in page.get("Contents", []):
                found[item["Key"]] = self.client.get_object(Bucket=self.name, Key=item["Key"])["Body"].read()
        return found

    def segments(self, session: str) -> bytes:
        """The session's segments, concatenated in order (what the store holds of its transcript)."""
        prefix = f"team/sessions/{session}/segments/"
        return b"".join(data for key, data in sorted(self.objects().items()) if key.startswith(prefix))


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Bucket:
    import boto3

    for key, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    name = f"t-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket=name)
    monkeypatch.setenv("CTXAGENT_STORE", f"s3://{name}/team")
    return Bucket(f"s3://{name}/team", name, client, tmp_path)


def jsonl(out: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_a_session_resumes_on_another_machine_exactly_and_reads_the_handles_made_there(bucket, tmp_path):
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("big", "shell", command="seq 1 30000")]}, "first answer",
        {"tool_calls": [call("r", "read_output", handle="@big", start_line=12345, end_line=12346)]}, "second answer",
    ])
    a, b = bucket.machine("A"), bucket.machine("B")
    out = ctxagent("run", "--batch", "--session", "s", "--model", model, "--allow", "shell", "count", env=a)
    assert (out.returncode, out.stdout) == (0, "first answer\n"), out.stderr
    assert "team/sessions/s/outputs/big.out" in bucket.objects()  # offloaded on A, uploaded

    with _on(b):  # B has never seen it: heads only (the CLI in this process)
        listed = [json.loads(line) for line in run_cli("sessions", "list", "--json").stdout.splitlines()]
    assert [(r["name"], r["model"]) for r in listed] == [("s", model)]
    cache_a = next((bucket.root / "A" / "stores").iterdir()) / "sessions" / "s" / "transcript.jsonl"
    records_a = [json.loads(line) for line in cache_a.read_text(encoding="utf-8").splitlines()]
    assert jsonl(ctxagent("inspect", "--store", bucket.url, "transcript", "--session", "s", "--json",
                          env={**b, "CTXAGENT_STORE": ""})) == records_a
    with _on(a):  # the view A would send next, in this process
        from ctxagent.cli import sessions_export
        from ctxagent.cli.options import pick

        view_a = sessions_export.openai_messages(pick("s", bucket.url))
    assert ctxagent("sessions", "export", "s", "--format", "openai", env=b).stdout == view_a != ""

    out = ctxagent("resume", "--batch", "--session", "s", "now read it", env=b)
    assert (out.returncode, out.stdout) == (0, "second answer\n"), out.stderr
    records_b = jsonl(ctxagent("inspect", "transcript", "--session", "s", "--json", env=b))
    assert records_b[:len(records_a)] == records_a
    read = next(r["message"]["content"] for r in records_b if r["kind"] == "message"
                and r["message"].get("tool_call_id") == "r")
    assert "12345\n12346" in read  # @big, offloaded on A, read on B
    with _on(a):  # A catches up
        assert [json.loads(line) for line in run_cli("inspect", "transcript", "-s", "s", "--json").stdout.splitlines()
                ] == records_b


def test_a_second_writer_is_refused_while_the_lease_lives_and_a_stale_writer_is_fenced(bucket, tmp_path):
    mark, go = tmp_path / "started", tmp_path / "go"
    wait = f"touch {mark}; while [ ! -e {go} ]; do sleep 0.05; done"  # the tool runs until the test says go
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("t", "shell", command=wait)]}, "final"])
    a, b = bucket.machine("A", CTXAGENT_LEASE_SECONDS="2.5"), bucket.machine("B")
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--batch", "--session", "s", "--model", model,
                             "--allow", "shell", "go"], env={**os.environ, **a}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        _wait_for(mark, proc)
        busy = ctxagent("resume", "--batch", "--session", "s", env=b)
        assert busy.returncode == 1 and "in use by ctxagent on A" in busy.stderr, busy.stderr
        proc.send_signal(signal.SIGSTOP)  # A stalls (a long GC pause, a suspended VM) past its lease
        time.sleep(2.7)
        took = ctxagent("resume", "--batch", "--session", "s", env=b)
        assert (took.returncode, took.stdout) == (0, "final\n"), took.stderr
        go.touch()
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1 and "taken over" in err, err
    stored = [json.loads(line) for line in bucket.segments("s").splitlines()]
    results = [r["message"]["content"] for r in stored if r["kind"] == "message" and r["message"]["role"] == "tool"]
    assert len(results) == 1 and results[0].startswith("[ctxagent] interrupted")  # B's; A's late one never landed
    assert [r["message"]["content"] for r in stored if r["kind"] == "message"][-1] == "final"


def test_kill_9_then_resume_elsewhere_after_the_lease_expires_loses_nothing(bucket, tmp_path):
    mark = tmp_path / "started"
    model = script(tmp_path / "s.yaml", [{"tool_calls": [call("x", "shell", command="echo one")]},
                                         {"tool_calls": [call("y", "shell", command=f"touch {mark}; sleep 60")]},
                                         "final"])
    a, b = bucket.machine("A", CTXAGENT_LEASE_SECONDS="4"), bucket.machine("B")
    proc = subprocess.Popen([sys.executable, "-m", "ctxagent", "run", "--batch", "--session", "k", "--model", model,
                             "--allow", "shell", "go"], env={**os.environ, **a}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True)
    try:
        _wait_for(mark, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    killed_at = time.time()
    stored = bucket.segments("k")
    assert b'"tool_calls"' in stored and b'"id":"y"' in stored  # the step before the kill reached the store
    with _on(b), pytest.raises(SessionBusyError, match="in use by ctxagent on A"), Session.at("k", bucket.url).writer():
        pass  # A's lease outlives A a while (checked in this process: a CLI would start too slowly)
    time.sleep(max(0.0, killed_at + 4.2 - time.time()))
    out = ctxagent("resume", "--batch", "--session", "k", env=b)
    assert (out.returncode, out.stdout) == (0, "final\n"), out.stderr
    cache = next((bucket.root / "B" / "stores").iterdir()) / "sessions" / "k" / "transcript.jsonl"
    assert cache.read_bytes().startswith(stored)  # 0 records lost
    assert bucket.segments("k") == cache.read_bytes()  # and the store has all of B's
    messages = [json.loads(line)["message"] for line in cache.read_bytes().splitlines() if b'"kind":"message"' in line]
    from ctxagent.messages import pair_violations

    assert pair_violations(messages) == []
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["x", "y"]


def test_a_secret_in_a_tool_output_never_reaches_the_store(bucket, tmp_path):
    secret = "s3cr3t-value-0123456789-abcdef"
    model = script(tmp_path / "s.yaml", [
        {"tool_calls": [call("big", "shell", command='echo "$MY_SERVICE_TOKEN"; seq 1 30000; echo "$MY_SERVICE_TOKEN"'),
                        call("small", "shell", command='echo "token: $MY_SERVICE_TOKEN"')]}, "done"])
    profile = tmp_path / "p.yaml"  # the shell gets no credential variable unless the profile passes it (issue 31)
    profile.write_text("tool_environment: {pass_through: [MY_SERVICE_TOKEN]}\n", encoding="utf-8")
    out = ctxagent("run", "--batch", "--session", "sec", "--model", model, "--allow", "shell", "--profile",
                   str(profile), "go", env=bucket.machine("A", MY_SERVICE_TOKEN=secret))
    assert out.returncode == 0, out.stderr
    objects = bucket.objects()
    assert "team/sessions/sec/outputs/big.out" in objects
    assert b"[REDACTED:env:MY_SERVICE_TOKEN]" in objects["team/sessions/sec/outputs/big.out"]
    assert [key for key, data in objects.items() if secret.encode() in data] == []


def test_a_step_a_crash_kept_from_the_store_is_uploaded_next_time_or_set_aside_if_the_store_moved_on(
        tmp_path, monkeypatch):
    """In process, on a ``file://`` store (fsspec's local filesystem, create-only with ``xb``)."""
    from ctxagent.sessions import records

    url = (tmp_path / "store").as_uri()
    header = records.SessionHeader(name="c", model="scripted:x", profile="default", context_window=1000)
    with Session.at("c", url).writer() as session:
        session.transcript.append([header])
    local = Session.at("c", url).transcript.path
    with open(local, "ab") as fh:  # appended locally, killed before the upload
        fh.write(records.dumps(records.EndRecord(reason="answered", turn=1)).encode() + b"\n")
    with Session.at("c", url).writer():
        pass
    segments = sorted((tmp_path / "store" / "sessions" / "c" / "segments").iterdir())
    assert b"".join(p.read_bytes() for p in segments) == local.read_bytes()  # uploaded, after the fence

    with open(local, "ab") as fh:  # again; but another machine continues the session meanwhile
        fh.write(b'{"kind":"end","reason":"lost","turn":2}\n')
    other = segments[-1].with_name(f"{len(segments) + 1:012d}.jsonl")
    other.write_bytes(records.dumps(records.EndRecord(reason="elsewhere", turn=2)).encode() + b"\n")
    with pytest.warns(UserWarning) as caught, Session.at("c", url).writer():
        pass
    assert [str(w.message) for w in caught] == [
        f"{local}: lines the session store never got (another machine continued the session) (40 bytes) set aside, "
        "moved to transcript.unsynced-1.jsonl"]
    assert b"elsewhere" in local.read_bytes() and b"lost" not in local.read_bytes()
    assert b"lost" in (local.parent / "transcript.unsynced-1.jsonl").read_bytes()


@contextmanager
def _on(machine: dict[str, str]) -> Iterator[None]:
    """This process as ``machine`` for the block (its data dir and host)."""
    saved = {key: os.environ.get(key) for key in machine}
    os.environ.update(machine)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait until ``path`` exists; fail if ``proc`` ends first or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before {path.name} appeared: "
                        f"{proc.stderr.read() if proc.stderr else ''}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_rename_and_delete_move_and_remove_the_objects_in_the_store(tmp_path, monkeypatch):
    from ctxagent.sessions import records

    store = tmp_path / "store"
    monkeypatch.setenv("CTXAGENT_STORE", store.as_uri())  # for the commands: read at the command line's edge
    with Session.at("old", store.as_uri()).writer() as session:
        session.transcript.append([records.SessionHeader(name="old", model="scripted:x", profile="default",
                                                         context_window=1000)])
        session.store.put_bytes("@h", b"value")
    assert run_cli("sessions", "rename", "old", "new").exit_code == 0
    assert sorted(p.name for p in (store / "sessions").iterdir()) == ["new"]
    assert (store / "sessions" / "new" / "outputs" / "h.out").read_bytes() == b"value"
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(tmp_path / "other"))  # another machine sees it renamed
    assert run_cli("sessions", "show", "new").exit_code == 0
    assert run_cli("sessions", "delete", "new", "--yes").exit_code == 0
    assert list((store / "sessions").iterdir()) == []


def test_sub_agent_sessions_live_under_their_parent_in_the_store(bucket, tmp_path, monkeypatch):
    child = script(tmp_path / "child.yaml", [{"tool_calls": [call("c", "shell", command="seq 1 30000")]},
                                             "the child counted"])
    parent = script(tmp_path / "parent.yaml", [{"tool_calls": [call("d1", "delegate", task="count")]}, "done"])
    prof = tmp_path / "p.yaml"
    prof.write_text(f"tools: [shell, read_output, delegate]\npermissions: {{kinds: {{exec: allow}}}}\n"
                    f"delegate: {{model: '{child}'}}\n", encoding="utf-8")
    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(tmp_path / "A"))
    out = run_cli("run", "--json", "--session", "par", "--model", parent, "--profile", str(prof), "go")
    assert (out.exit_code, result_of(out)["answer"]) == (0, "done"), out.stdout
    keys = set(bucket.objects())
    assert "team/sessions/par/agents/d1/segments/000000000001.jsonl" in keys
    assert "team/sessions/par/agents/d1/outputs/c.out" in keys  # the child's offloaded output

    monkeypatch.setenv("CTXAGENT_DATA_DIR", str(tmp_path / "B"))  # another machine: the child's output first
    assert run_cli("inspect", "output", "@c", "--session", "par/d1").stdout.startswith("1\n2\n3\n")
    shown = run_cli("inspect", "transcript", "--session", "par").stdout
    assert "sub-agent par/d1" in shown and "ended answered" in shown


def test_on_s3_a_create_never_replaces_an_object_and_a_check_sees_what_another_machine_just_wrote(bucket, tmp_path):
    """In process, on the moto server: create-only puts (``If-None-Match: *``) also of no bytes (the
    fence's empty segment, which a plain write would put over a stale writer's late one), and no
    listings cache between a listing and an existence check."""
    from ctxagent.sessions.remote import Store, segment_name

    store = Store(bucket.url)
    path = store.path("sessions", "s", "segments", segment_name(1))
    assert store.create(path, b"late step") is True
    empty = tmp_path / "empty.out"
    empty.write_bytes(b"")
    assert store.create(path, b"") is False and store.create(path, b"other") is False
    assert store.create(path, empty) is False
    key = "team/sessions/s/segments/000000000001.jsonl"
    assert bucket.objects() == {key: b"late step"}
    assert store.names(store.path("sessions", "s", "segments")) == [segment_name(1)]
    bucket.client.put_object(Bucket=bucket.name, Key=key.replace("01.jsonl", "02.jsonl"), Body=b"another machine's")
    assert store.size(store.path("sessions", "s", "segments", segment_name(2))) is not None


def _session_keys(bucket: Bucket, name: str) -> list[str]:
    return sorted(key for key in bucket.objects() if key.startswith(f"team/sessions/{name}/"))


def test_a_machine_that_never_opened_a_store_session_deletes_and_forks_it(bucket, tmp_path):
    """``sessions delete`` (and ``fork``) on a machine without the session's cache said "no session
    named 's'": they looked for the local cache folder only."""
    model = script(tmp_path / "s.yaml", ["first answer"])
    a, b, c = bucket.machine("A"), bucket.machine("B"), bucket.machine("C")
    assert ctxagent("run", "--batch", "--session", "s", "--model", model, "go", env=a).returncode == 0
    forked = ctxagent("sessions", "fork", "s", "t", env=c)
    assert forked.returncode == 0, forked.stderr
    out = ctxagent("sessions", "delete", "s", "--yes", env=b)
    assert out.returncode == 0, out.stderr
    assert _session_keys(bucket, "s") == [] and _session_keys(bucket, "t") != []
    gone = ctxagent("sessions", "delete", "nothing-here", "--yes", env=b)
    assert gone.returncode == 2 and "no session named 'nothing-here'" in gone.stderr


@pytest.mark.parametrize("elsewhere", ["deleted", "emptied", "started again"])
def test_a_session_gone_from_the_store_is_not_resumed_from_a_stale_cache(bucket, tmp_path, elsewhere):
    """Deleted (or emptied) on another machine, then resumed from this machine's stale cache: the
    resume exited 0 silently, fenced segment 3 and uploaded its steps after it, a fragment without a
    header that no machine could open. The store's state wins, and the user is told."""
    model = script(tmp_path / "s.yaml", ["first answer", "second answer", "third answer"])
    a, b = bucket.machine("A"), bucket.machine("B")
    assert ctxagent("run", "--batch", "--session", "s", "--model", model, "go", env=a).returncode == 0
    synced = _session_keys(bucket, "s")
    if elsewhere == "emptied":  # every segment gone, the lease left
        bucket.client.delete_objects(Bucket=bucket.name, Delete={"Objects": [
            {"Key": key} for key in synced if "/segments/" in key]})
    else:
        assert ctxagent("sessions", "show", "s", env=b).returncode == 0  # B opens it, then deletes it
        assert ctxagent("sessions", "delete", "s", "--yes", env=b).returncode == 0
        assert _session_keys(bucket, "s") == []
    if elsewhere == "started again":  # a new session under the same name, longer than A's
        other = script(tmp_path / "o.yaml", [{"tool_calls": [call(f"c{i}", "list_dir") for i in range(3)]},
                                             {"tool_calls": [call("d", "list_dir")]}, "other answer", "its next"])
        assert ctxagent("run", "--batch", "--session", "s", "--model", other, "again", env=b).returncode == 0
    before = _session_keys(bucket, "s")
    out = ctxagent("resume", "--batch", "--session", "s", "more", env=a)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    what = "holds another session under its name" if elsewhere == "started again" else "has no segment of it any more"
    assert f"session 's': the session store {bucket.url} {what}" in out.stderr
    assert "the store's state wins" in out.stderr and "stale cache was moved to" in out.stderr
    assert _session_keys(bucket, "s") == before  # nothing written: no fragment, no lease left
    stale = next((bucket.root / "A" / "stores").iterdir()) / "stale"
    assert [p.name.split("-")[0] for p in stale.iterdir()] == ["s"]  # the cache is kept, out of the way
    if elsewhere == "started again":  # this machine now opens the store's session
        out = ctxagent("resume", "--batch", "--session", "s", "more", env=a)
        assert (out.returncode, out.stdout) == (0, "its next\n"), out.stderr
        return
    out = ctxagent("run", "--batch", "--session", "s", "--model", model, "anew", env=a)
    assert out.returncode == 0, out.stderr
    assert b'"kind":"session"' in bucket.segments("s").splitlines()[0]  # a whole session, header first
