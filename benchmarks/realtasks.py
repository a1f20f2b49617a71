"""The tasks of ``python -m benchmarks.realmodel``: small, on real files, each with a check a script runs.

Each :class:`Task` writes its files into a fresh folder (:attr:`Task.setup`), gives one or more user
messages (the first a ``run``, the others ``resume``: one session), and checks the final answer or
the folder (:attr:`Task.check`). Generated data is seeded, so every run sees the same files; two
tasks read real files nobody here wrote (litellm's bundled model map, the standard library's JSON
decoder). Sized for a 1.5B model on two CPU cores: a task is one to a few requests.
"""

from __future__ import annotations

import inspect
import json
import json.decoder
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path


@dataclass(frozen=True)
class Task:
    """One task: ``name``; what situation it ``covers``; the server's ``window`` (tokens);
    ``setup(folder)``; the user ``turns``; ``check(answer, folder)``; ``allow``: the ``--allow``
    grant it needs (a shell command, a file write), None for none."""

    name: str
    covers: str
    window: int
    setup: Callable[[Path], None]
    turns: tuple[str, ...]
    check: Callable[[str, Path], bool]
    allow: str | None = None


def says(*values: str) -> Callable[[str, Path], bool]:
    """A check: the answer holds every one of ``values`` (case-insensitive)."""
    return lambda answer, _folder: all(v.lower() in answer.lower() for v in values)


def files(**texts: str) -> Callable[[Path], None]:
    """A setup that writes ``texts`` (keys are paths, ``__`` for ``/``)."""
    def write(folder: Path) -> None:
        for key, text in texts.items():
            path = folder / key.replace("__", "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return write


# ---------------------------------------------------------------- generated data


ERROR_ID, ERROR_LATENCY = "7f3a9c41", "2113"


def app_log(folder: Path) -> None:
    """``app.log``: ~2 MB of INFO lines, one ERROR line (request id 7f3a9c41, 2113 ms) at 3/7 of it."""
    rng = random.Random(7)
    paths = ["/api/users", "/api/orders", "/api/items", "/health", "/api/cart"]
    lines, size = [], 0
    while size < 2_000_000:
        n = len(lines)
        line = (f"2026-12-04T10:{n // 600 % 60:02d}:{n // 10 % 60:02d}.{n % 1000:03d}Z INFO "
                f"request_id={rng.getrandbits(32):08x} method=GET path={rng.choice(paths)} status=200 "
                f"latency_ms={rng.randint(1, 300)}")
        lines.append(line)
        size += len(line) + 1
    at = len(lines) * 3 // 7
    lines[at] = (f"{lines[at].split(' INFO ')[0]} ERROR request_id={ERROR_ID} method=POST path=/api/orders "
                 f"status=500 latency_ms={ERROR_LATENCY} error=\"db timeout\"")
    (folder / "app.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def model_map(folder: Path) -> None:
    """``models.json``: litellm's bundled model map (a real 3 MB JSON file), copied as it is."""
    spec = find_spec("litellm")
    assert spec is not None and spec.submodule_search_locations, "litellm is installed with ctxagent"
    source = Path(next(iter(spec.submodule_search_locations))) / "model_prices_and_context_window_backup.json"
    shutil.copyfile(source, folder / "models.json")


def model_map_check(answer: str, folder: Path) -> bool:
    window = json.loads((folder / "models.json").read_text(encoding="utf-8"))["gpt-4o"]["max_input_tokens"]
    return bool(re.search(rf"\b{window}\b|\b{window:,}\b", answer))


def decoder_source(folder: Path) -> None:
    """``decoder.py``: the standard library's JSON decoder, copied as it is."""
    shutil.copyfile(inspect.getfile(json.decoder), folder / "decoder.py")


def _lines_of(topic: str, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["system", "value", "record", "process", "window", "format", "buffer", "signal", "network", "index"]
    return [f"{topic} note {i}: the {rng.choice(words)} {rng.choice(words)} stays {rng.choice(words)} "
            f"for {rng.randint(2, 99)} cycles." for i in range(n)]


def reports(folder: Path) -> None:
    """``report1.txt`` .. ``report3.txt``: ~700 tokens each, each ending with one ``CODE:`` line."""
    for i, code in enumerate(("AMBER", "COBALT", "VIOLET"), start=1):
        lines = [*_lines_of(f"report{i}", 45, i), f"CODE: {code}-{i * 11}"]
        (folder / f"report{i}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def chapters(folder: Path) -> None:
    """``chapter1.txt`` .. ``chapter4.txt``: ~800 tokens of notes each (a long session's reading)."""
    for i, topic in enumerate(("rivers", "bridges", "harbors", "canals"), start=1):
        lines = [f"Chapter {i} is about {topic}.", *_lines_of(topic, 55, 10 + i)]
        (folder / f"chapter{i}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def noisy_script(folder: Path) -> None:
    """``gen.py``: prints 4,000 lines (~40K tokens), the last one ``DONE total=83517``."""
    (folder / "gen.py").write_text(
        "for i in range(4000):\n    print(f'step {i}: processed batch {i * 7 % 1000} of the input queue')\n"
        "print('DONE total=83517')\n", encoding="utf-8")


CALC = "def add(a, b):\n    return a - b\n\n\ndef double(x):\n    return 2 * x\n"
CALC_TEST = ("from calc import add, double\n\nassert add(2, 3) == 5, add(2, 3)\nassert add(-1, 1) == 0\n"
             "assert double(4) == 8\nprint('all tests passed')\n")


def calc_fixed(_answer: str, folder: Path) -> bool:
    """The task's own test passes in the folder (run with this Python, no bytecode: a ``calc.py``
    edited within the second of an earlier run, at the same size, would be read from a stale .pyc)."""
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    done = subprocess.run([sys.executable, "-B", "test_calc.py"], cwd=folder, capture_output=True, text=True,
                          timeout=60)
    return done.returncode == 0


SETTINGS = {"name": "shop", "debug": True, "port": 8080, "workers": 4}


def settings_edited(_answer: str, folder: Path) -> bool:
    try:
        data = json.loads((folder / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return data == {**SETTINGS, "debug": False}


def team(folder: Path) -> None:
    for name, on_call in (("alice", "no"), ("bob", "no"), ("carol", "yes"), ("dave", "no")):
        path = folder / "team" / f"{name}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"name: {name}\nrole: engineer\non call: {on_call}\n", encoding="utf-8")


def data_folder(folder: Path) -> None:
    for i in range(7):
        path = folder / "data" / f"sample_{i}.csv"
        path.parent.mkdir(exist_ok=True)
        path.write_text("id,value\n1,2\n", encoding="utf-8")


TASKS: tuple[Task, ...] = (
    Task("notes", "one file read through a tool", 4096, files(**{"notes.txt": "The launch code is TANGO-42.\n",
                                                                 "readme.md": "A small project.\n"}),
         ("Read notes.txt and tell me the launch code.",), says("TANGO-42")),
    Task("secret-file", "list a folder, pick the file by name, read it", 4096,
         files(**{"a.txt": "nothing here\n", "b.txt": "nothing here either\n",
                  "secret_a17.txt": "password: plum-koala-9\n"}),
         ("List the files here, then read the one whose name starts with 'secret' and tell me the password.",),
         says("plum-koala-9")),
    Task("log-error-id", "a value in a 2 MB log reachable only through the offloaded output's handle", 4096, app_log,
         ("Read app.log and tell me the request id of the one ERROR line.",), says(ERROR_ID)),
    Task("log-error-latency", "another value of the same 2 MB log, through the handle", 4096, app_log,
         ("Read app.log. How many milliseconds (latency_ms) did the request on the ERROR line take?",),
         says(ERROR_LATENCY)),
    Task("model-map", "a real 3 MB JSON file (litellm's model map), searched through the handle", 4096, model_map,
         ("Read models.json and tell me the max_input_tokens of the model \"gpt-4o\".",), model_map_check),
    Task("real-source", "a real source file (the standard library's JSON decoder)", 4096, decoder_source,
         ("Read decoder.py. What is the default value of the strict parameter of JSONDecoder.__init__?",),
         says("True")),
    Task("config-pair", "a question over two files", 4096,
         files(**{"config__db.ini": "[db]\nhost = db.internal\nuser = shop\n",
                  "config__net.ini": "[net]\nport = 5433\ntimeout = 30\n"}),
         ("The database host is in config/db.ini and its port in config/net.ini. Read both and answer "
          "with host:port.",), says("db.internal", "5433")),
    Task("on-call", "a question over several files found by listing a folder", 4096, team,
         ("The folder team/ has one file per person. Read them and tell me who is on call.",), says("carol")),
    Task("file-count", "a listing", 4096, data_folder,
         ("How many files are in the data folder?",),
         lambda answer, _f: bool(re.search(r"\b(7|seven)\b", answer, re.IGNORECASE))),
    Task("fix-test", "an edit verified by running a test", 4096,
         files(**{"calc.py": CALC, "test_calc.py": CALC_TEST}),
         ("test_calc.py fails. Read calc.py, fix the bug with write_file, then run `python3 test_calc.py` "
          "with the shell tool to check that it prints 'all tests passed'.",), calc_fixed,
         allow="shell,write_file"),
    Task("edit-json", "an edit of a file, checked on disk", 4096,
         files(**{"settings.json": json.dumps(SETTINGS, indent=2) + "\n"}),
         ("In settings.json, set \"debug\" to false and keep everything else as it is. Write the file back.",),
         settings_edited, allow="write_file"),
    Task("noisy-command", "a command whose output overflows an unmanaged context", 4096, noisy_script,
         ("Run `python3 gen.py` with the shell tool and tell me the total on its last line.",), says("83517"),
         allow="shell"),
    Task("three-reports", "outputs that together overflow an unmanaged 4K context; the answer is in the last",
         4096, reports,
         ("Read report1.txt, then report2.txt, then report3.txt, one at a time. Then tell me the CODE line "
          "of report3.txt.",), says("VIOLET-33")),
    Task("early-fact", "a fact given early in a long session, used at the end, under an 8K window", 8192, chapters,
         ("Remember this for later: the deploy tag is ORCHID-7. Now read chapter1.txt and tell me in a few words "
          "what it is about.",
          "Read chapter2.txt and tell me in a few words what it is about.",
          "Read chapter3.txt and tell me in a few words what it is about.",
          "Read chapter4.txt and tell me in a few words what it is about.",
          "What is the deploy tag I gave you at the start?"), says("ORCHID-7")),
)


def select(names: str | None) -> list[Task]:
    """The tasks ``names`` lists (comma-separated; None or empty: all). Raises ``SystemExit`` naming
    the unknown ones."""
    if not names:
        return list(TASKS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {t.name: t for t in TASKS}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown task(s) {', '.join(unknown)}; the tasks: {', '.join(known)}")
    return [known[n] for n in wanted]
