"""The two corpora of the secret scan (issue 31): real files that must pass byte for byte, and
planted credentials that must all be caught.

**No-change corpus** (:func:`no_change`): files nobody here wrote, collected at run time from the
installed packages (every JSON, YAML, Markdown, text and Jinja file shipped in litellm, certifi's CA
bundle, botocore's service data, the ``Cargo.lock`` files and the ``RECORD`` files of every installed
distribution: lists of sha256 digests) and real tool output made at run time (``pip list -v``, ``pip
install -v --dry-run`` of this checkout, ``pytest -v`` of a small suite, ``git log -p`` of a
repository built from an installed package's sources, ``env`` of a clean shell, ``kubectl create ...
--dry-run=client -o yaml``). A source or a tool that is missing is left out and named.

**Secret corpus** (:func:`secret_cases`): realistic credentials of every shape the scan promises
(provider keys, cloud keys, VCS and chat tokens, JWTs, PEM private keys, passwords in URLs and
connection strings, values under secret-named keys, the exact values of the environment's
credential variables, with spaces and quotes), each in the places it is found in the wild, inline
and JSON-escaped (as inside a tool result or a tool call's arguments), generated from a seeded
generator (no key-shaped literal is committed); and near misses in the same shapes (numbers,
references, paths, placeholders, documentation examples) that must stay as they are.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import shutil
import string
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"
B64 = ALNUM + "+/"

PACKAGE_GLOBS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("litellm", ("*.json", "*.yaml", "*.yml", "*.md", "*.txt", "*.jinja")),
    ("certifi", ("*.pem",)),
    ("botocore/data", ("*.json", "*.json.gz")),
)


@dataclass(frozen=True)
class Sample:
    """One file of the no-change corpus: where it came from, and its bytes."""

    name: str
    data: bytes


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def package_files(site: Path | None = None) -> tuple[list[Sample], list[str]]:
    """The shipped data files of the installed packages (``.json.gz`` decompressed), sorted by
    name; and the sources that are not installed here."""
    site = site or _site_packages()
    found: list[Sample] = []
    missing: list[str] = []
    for folder, globs in PACKAGE_GLOBS:
        root = site / folder
        if not root.is_dir():
            missing.append(folder)
            continue
        for path in sorted({p for pattern in globs for p in root.rglob(pattern) if p.is_file()}):
            data = path.read_bytes()
            found.append(Sample(str(path.relative_to(site)), gzip.decompress(data) if path.suffix == ".gz" else data))
    locks = sorted(site.rglob("Cargo.lock")) + sorted(site.glob("*.dist-info/RECORD"))
    found += [Sample(str(p.relative_to(site)), p.read_bytes()) for p in locks]
    return found, missing


def _run(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> bytes | None:
    """stdout and stderr of ``args`` (None when the program is missing or fails to start)."""
    if shutil.which(args[0]) is None and not Path(args[0]).is_file():
        return None
    try:
        done = subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout


def _git_repository(root: Path) -> Path:
    """A repository of three commits made from the sources of an installed package (``filelock``)."""
    import filelock

    repo = root / "repo"
    repo.mkdir()
    env = {**_clean_env(root), "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.org"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    sources = sorted(Path(filelock.__file__).parent.glob("*.py"))
    for i, chunk in enumerate((sources[::3], sources[1::3], sources[2::3])):
        for path in chunk:
            shutil.copy(path, repo / path.name)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "commit", "-q", "-m", f"filelock sources, part {i + 1}"], cwd=repo, check=True, env=env)
    return repo


def _clean_env(root: Path) -> dict[str, str]:
    return {"HOME": str(root), "PATH": os.defpath + ":" + os.path.dirname(sys.executable), "LANG": "C.UTF-8"}


PYTEST_SUITE = '''
import pytest

@pytest.mark.parametrize("n", range(12))
def test_squares(n):
    assert n * n >= n

def test_a_failure_with_a_diff():
    assert {"max_tokens": 4096, "model": "gpt-4o"} == {"max_tokens": 2048, "model": "gpt-4o"}

@pytest.mark.skip(reason="needs a GPU")
def test_skipped():
    pass
'''


def tool_outputs(root: Path, checkout: Path | None = None) -> tuple[list[Sample], list[str]]:
    """Real tool output made now in ``root`` (programs run in parallel); and the tools missing here.
    ``checkout``: the project ``pip install -v --dry-run`` builds (default: this repository)."""
    checkout = checkout or Path(__file__).resolve().parents[1]
    env = _clean_env(root)
    (root / "test_corpus_suite.py").write_text(PYTEST_SUITE, encoding="utf-8")
    python = sys.executable
    kubectl = [["kubectl", "create", "deployment", "web", "--image=nginx:1.27", "--replicas=3", "--port=8080"],
               ["kubectl", "create", "configmap", "app", "--from-literal=LOG_LEVEL=debug",
                "--from-literal=MAX_TOKENS=4096", "--from-literal=TOKEN_TTL_S=3600"],
               ["kubectl", "create", "service", "clusterip", "web", "--tcp=80:8080"],
               ["kubectl", "create", "serviceaccount", "deployer"],
               ["kubectl", "create", "namespace", "staging"]]
    kubeconfig = root / "kubeconfig"
    config_view = ("kubectl config set-cluster dev --server=https://10.0.0.1:6443 --insecure-skip-tls-verify=true"
                   " && kubectl config set-credentials deployer --exec-command=aws-iam-authenticator"
                   " && kubectl config set-context dev --cluster=dev --user=deployer --namespace=staging"
                   " && kubectl config use-context dev && kubectl config view")
    commands: dict[str, list[str]] = {
        "pip list -v": [python, "-m", "pip", "list", "-v", "--disable-pip-version-check"],
        "pip install -v --dry-run": [python, "-m", "pip", "install", "-v", "--dry-run", "--no-deps", "--no-index",
                                     "--no-build-isolation", "--disable-pip-version-check", str(checkout)],
        "pytest -v": [python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:randomly",
                      str(root / "test_corpus_suite.py")],
        "env": ["bash", "-l", "-c", "env"],  # a login shell of a clean environment: /etc/profile's variables
        **{" ".join(args[:3]): [*args, "--dry-run=client", "-o", "yaml"] for args in kubectl},
        "kubectl config view": ["bash", "-c", f"export KUBECONFIG={kubeconfig}; {config_view}"],
    }
    found: list[Sample] = []
    missing: list[str] = []
    with ThreadPoolExecutor(4) as pool:
        futures = {name: pool.submit(_run, args, root, env) for name, args in commands.items()}
        if shutil.which("git"):
            repo = _git_repository(root)
            futures["git log -p"] = pool.submit(_run, ["git", "log", "-p", "--stat"], repo, env)
        else:
            missing.append("git log -p")
        for name, future in futures.items():
            out = future.result()
            (missing.append(name) if not out else found.append(Sample(f"$ {name}", out)))
    return found, missing


def documented_example(name: str) -> bool:
    """botocore's ``examples-1.json`` files: AWS's request and response samples, which hold sample
    credentials in credential fields (an IAM password, a KMS grant token, a presigned URL's signature).
    A scan must replace those (they are credentials in form and place); they are measured apart, and
    every value replaced there must stand under such a name (:data:`EXAMPLE_CREDENTIAL`)."""
    return name.startswith("botocore/") and name.endswith("examples-1.json")


# what stands before each value replaced in a documented example: a credential field of the sample
EXAMPLE_CREDENTIAL = r'(?:Password|Token)": "$|[?&]Signature=$'


def no_change(root: Path) -> tuple[list[Sample], list[Sample], list[str]]:
    """The no-change corpus (package files, then tool output made in ``root``), the documented
    examples apart (:func:`documented_example`), and the sources and tools missing here."""
    files, missing = package_files()
    outputs, absent = tool_outputs(root)
    plain = [sample for sample in files if not documented_example(sample.name)]
    return plain + outputs, [sample for sample in files if documented_example(sample.name)], missing + absent


# --------------------------------------------------------------------------- the secret corpus


@dataclass(frozen=True)
class Case:
    """One text holding planted ``secrets`` (each must be gone, whole) and ``benign`` values
    (each must still be there); ``env``: environment variables the redactor is made with."""

    kind: str
    text: str
    secrets: tuple[str, ...]
    benign: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


class _Gen:
    def __init__(self, seed: int):
        self.rnd = random.Random(seed)

    def chars(self, n: int, alphabet: str = ALNUM) -> str:
        return "".join(self.rnd.choice(alphabet) for _ in range(n))

    def password(self) -> str:
        """A password as people make them: a word, digits and a symbol, some capitals."""
        word = self.rnd.choice(["summer", "dragon", "falcon", "orchid", "harbor", "violet", "tundra", "copper"])
        word = "".join(c.upper() if self.rnd.random() < 0.3 else c for c in word)
        return word + self.chars(self.rnd.randint(2, 4), string.digits) + self.rnd.choice("!#%^*-_.~") + \
            self.chars(self.rnd.randint(1, 3))

    def jwt(self) -> str:
        def part(data: dict[str, object]) -> str:
            return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

        head = part({"alg": "HS256", "typ": "JWT"})
        body = part({"sub": self.chars(12, string.digits), "name": "Ada", "iat": 1764460800})
        return f"{head}.{body}.{self.chars(43, URLSAFE)}"

    def pem(self, kind: str, lines: int = 6) -> str:
        body = "\n".join(self.chars(64, B64) for _ in range(lines)) + "\n" + self.chars(24, B64) + "=="
        return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


def _keys(g: _Gen) -> dict[str, str]:
    """One credential of each key and token format (the value alone)."""
    return {
        "openai-key": "sk-" + g.chars(20) + "T3BlbkFJ" + g.chars(20),
        "openai-project-key": "sk-" + "proj-" + g.chars(74, URLSAFE) + "T3BlbkFJ" + g.chars(74, URLSAFE),
        "openai-service-key": "sk-" + "svcacct-" + g.chars(64, URLSAFE),
        "anthropic-key": "sk-" + "ant-api03-" + g.chars(93, URLSAFE) + "AA",
        "aws-access-key": "AK" + "IA" + g.chars(16, string.ascii_uppercase + "234567"),
        "aws-session-key": "AS" + "IA" + g.chars(16, string.ascii_uppercase + "234567"),
        "github-token": "gh" + "p_" + g.chars(36),
        "github-oauth": "gh" + "o_" + g.chars(36),
        "github-pat": "github" + "_pat_" + g.chars(22) + "_" + g.chars(59),
        "gitlab-token": "gl" + "pat-" + g.chars(20, URLSAFE),
        "slack-token": "xo" + "xb-" + g.chars(12, string.digits) + "-" + g.chars(13, string.digits) + "-" + g.chars(24),
        "google-api-key": "AI" + "za" + g.chars(35, URLSAFE),
        "stripe-key": "sk" + "_live_" + g.chars(99),
        "huggingface-token": "hf" + "_" + g.chars(34, string.ascii_letters),
        "npm-token": "np" + "m_" + g.chars(36),
        "sendgrid-key": "S" + "G." + g.chars(22, URLSAFE) + "." + g.chars(43, URLSAFE),
        "jwt": g.jwt(),
    }


def _key_cases(g: _Gen) -> Iterator[Case]:
    places = ('{name}="{v}"', "export {name}={v}", 'client = Client(api_key="{v}")', "  api_key: {v}",
              '{{"apiKey": "{v}"}}', "found {v} in the logs", 'curl -H "Authorization: Bearer {v}" https://api.example.com')
    for kind, value in _keys(g).items():
        name = kind.upper().replace("-", "_")
        for place in places:
            yield Case(kind, place.format(v=value, name=name), (value,))


def _pem_cases(g: _Gen) -> Iterator[Case]:
    for kind in ("RSA ", "EC ", "OPENSSH ", "", "ENCRYPTED "):
        block = g.pem(kind)
        yield Case("private-key", f"$ cat ~/.ssh/id\n{block}\n$ ", (block,))
        yield Case("private-key", f'private_key = """{block}"""', (block,))


def _password_cases(g: _Gen) -> Iterator[Case]:
    pw = [g.password() for _ in range(12)]
    token = g.chars(32)
    aws_secret = g.chars(40, B64)
    places: list[tuple[str, str, str]] = [
        ("url-password", "postgresql://app:{v}@db.internal:5432/prod", pw[0]),
        ("url-password", "DATABASE_URL=mongodb+srv://admin:{v}@cluster0.example.mongodb.net/app", pw[1]),
        ("url-password", "redis://:{v}@cache.internal:6379/0", pw[2]),
        ("url-password", "git clone https://ada:{v}@git.example.com/team/app.git", pw[3]),
        ("url-query", "jdbc:mysql://db:3306/app?user=app&password={v}&useSSL=true", pw[4]),
        ("password", "Server=tcp:db.example.net,1433;Database=app;User ID=app;Password={v};Encrypt=true;", pw[5]),
        ("secret", "DB_PASSWORD={v}", pw[6]),
        ("password", "  password: {v}", pw[7]),
        ("password", '{{"username": "ada", "password": "{v}"}}', pw[8]),
        ("password", "mysqldump --password={v} app > app.sql", pw[9]),
        ("password", "mysql -u root -p{v} app", pw[10]),
        ("password", "PGPASSWORD={v} psql -h db app", pw[11]),
        ("secret", "aws_secret_access_key = {v}", aws_secret),
        ("secret", "AWS_SECRET_ACCESS_KEY={v}", aws_secret),
        ("secret", '  client_secret: "{v}"', token),
        ("secret", '{{"access_token": "{v}", "token_type": "bearer", "expires_in": 3600}}', token),
        ("secret", "STRIPE_SECRET={v}", token),
        ("header", 'curl -H "X-Api-Key: {v}" https://api.example.com/v1/items', token),
        ("header", "x-auth-token: {v}", token),
        ("header", "Cookie: {v}", f"session={token}; theme=dark"),  # the header's whole value
        ("bearer-token", "Authorization: Basic {v}", base64.b64encode(f"ada:{pw[0]}".encode()).decode()),
        ("bearer-token", "Authorization: Bearer {v}", token),
        ("url-query", "GET https://api.example.com/v1/data?api_key={v}&format=json", token),
        ("url-query", "https://bucket.s3.amazonaws.com/f.csv?X-Amz-Credential=x&X-Amz-Signature={v}",
         g.chars(64, "0123456789abcdef")),
    ]
    for kind, place, value in places:
        yield Case(kind, place.format(v=value), (value,))


def _environment_cases(g: _Gen) -> Iterator[Case]:
    """The exact values of credential variables, printed by ``env`` or ``cat .env`` whatever they hold."""
    for tail in (" is#Strong99", "; drop table", ' "quoted" part', "#no-comment", " with spaces in it"):
        value = g.password() + tail
        env = {"DB_PASSWORD": value}
        yield Case("env", f"DB_PASSWORD={value}\nHOME=/home/ada\n", (value,), env=env)
        yield Case("env", f'DB_PASSWORD="{value}"', (value,), env=env)
    value = g.chars(26)
    yield Case("env", f"deploying with {value} now", (value,), env={"CI_DEPLOY_TOKEN": value})


NEAR_MISSES: tuple[str, ...] = (
    "max_tokens: 4096", '"input_cost_per_token": 1.25e-05,', "MAX_TOKENS=4096", "TOKEN_LIMIT = 128000",
    "password: ${DB_PASSWORD}", 'api_key = os.environ["OPENAI_API_KEY"]', "apiKey: process.env.API_KEY",
    "token_count=12", "secret_name: db-credentials", "API_KEY_FILE=/etc/app/keys/prod.pem", '"token": null',
    "password_min_length: 12", "auth_token: true", "expires_at: 2026-01-01T00:00:00Z",
    "access_key_id: AKIA" + "IOSFODNN7EXAMPLE", "Authorization: Bearer <your-token>", "Authorization: Bearer $API_KEY",
    "postgresql://user:password@localhost:5432/db", "secret_key = get_secret('prod')", '"NextToken": null',
    "x-api-key: your-api-key-here", "password = None", "  secretKeyRef: {name: db, key: password}",
    "token=", "--password-file=/run/secrets/db", "AWS_SECRET_ACCESS_KEY=${{ secrets.AWS_SECRET_ACCESS_KEY }}",
    "sk-learn-tutorial-notebooks-for-beginners", "the token: expired", "Cookie: theme=dark",
    '"private_key": "-----BEGIN RSA PRIVATE KEY-----\\n...\\n-----END RSA PRIVATE KEY-----"',
    "tokenizer_config.json", "secret_access_key: *****", "password: changeme-please",
)


def secret_cases(seed: int = 31) -> list[Case]:
    """Every planted credential in each of its places, inline and JSON-escaped (as inside a tool
    result, and again inside a tool call's arguments); then the near misses, one case each."""
    g = _Gen(seed)
    inline = [*_key_cases(g), *_pem_cases(g), *_password_cases(g), *_environment_cases(g)]
    cases: list[Case] = []
    for case in inline:
        cases.append(case)
        escaped = json.dumps({"role": "tool", "content": case.text})
        cases.append(Case(case.kind, escaped, case.secrets, env=case.env))
        twice = json.dumps({"arguments": json.dumps({"command": f"echo '{case.text}'"})})
        cases.append(Case(case.kind, twice, case.secrets, env=case.env))
    cases += [Case("near-miss", text, (), (text,)) for text in NEAR_MISSES]
    return cases


def leaked(secret: str, out: str, window: int = 8) -> bool:
    """Whether any ``window`` characters in a row of ``secret`` (or of its JSON-escaped form) are
    in ``out``: a secret removed whole leaves none of them (a key's first 12 characters do)."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(json.dumps(secret)[1:-1])[1:-1]}
    for form in forms:
        n = min(window, len(form))
        if any(form[i:i + n] in out for i in range(len(form) - n + 1)):
            return True
    return False


# --------------------------------------------------------------------------- scores

MARKER_RE = r"\[REDACTED:[^\]\s]{1,80}\]"


@dataclass
class NoChangeScore:
    """What the scan did to the no-change corpus: every file should come back as it was."""

    files: int = 0
    bytes: int = 0
    altered: list[tuple[str, int, str]] = field(default_factory=list)  # name, markers, first one in context

    @property
    def values_altered(self) -> int:
        return sum(n for _, n, _ in self.altered)


def score_no_change(samples: list[Sample], redact: object) -> NoChangeScore:
    """Run ``redact(bytes) -> bytes`` over every sample."""
    import re

    marker = re.compile(MARKER_RE.encode())
    score = NoChangeScore()
    for sample in samples:
        out = redact(sample.data)  # type: ignore[operator]
        score.files += 1
        score.bytes += len(sample.data)
        if out != sample.data:
            found = list(marker.finditer(out))
            n = max(len(found) - len(marker.findall(sample.data)), 1)
            at = found[0].start() if found else 0
            score.altered.append((sample.name, n, out[max(0, at - 60):at + 40].decode("utf-8", "replace")))
    return score


@dataclass
class SecretScore:
    """Recall (planted secrets removed whole) and precision (replacements that were exactly a secret)."""

    planted: int = 0
    missed: list[tuple[str, str]] = field(default_factory=list)  # kind, the text after redaction
    replaced_cases: int = 0  # cases (secret or near miss) where anything was replaced
    exact_cases: int = 0  # ... and what was replaced is exactly the planted secret
    near_misses: int = 0
    over: list[tuple[str, str]] = field(default_factory=list)  # kind, text: replaced more than the secret

    @property
    def caught(self) -> int:
        return self.planted - len(self.missed)

    @property
    def recall(self) -> float:
        return self.caught / self.planted if self.planted else 1.0

    @property
    def precision(self) -> float:
        return self.exact_cases / self.replaced_cases if self.replaced_cases else 1.0


def _only_secrets_replaced(case: Case, out: str) -> bool:
    import re

    blanked = re.sub(MARKER_RE, "\x00", out)
    text = case.text
    for secret in case.secrets:
        for form in sorted({secret, json.dumps(secret)[1:-1], json.dumps(json.dumps(secret)[1:-1])[1:-1]},
                           key=len, reverse=True):
            text = text.replace(form, "\x00")
    return blanked == text


def score_secrets(cases: list[Case], redactor_for: object) -> SecretScore:
    """Run ``redactor_for(env).text`` over every case."""
    score = SecretScore()
    for case in cases:
        out = redactor_for(case.env).text(case.text)  # type: ignore[operator]
        if case.secrets:
            score.planted += len(case.secrets)
            if any(leaked(secret, out) for secret in case.secrets):
                score.missed.append((case.kind, out))
        else:
            score.near_misses += 1
        if out != case.text:
            score.replaced_cases += 1
            if case.secrets and _only_secrets_replaced(case, out):
                score.exact_cases += 1
            else:
                score.over.append((case.kind, out))
    return score


RANDOM_VALUES: tuple[tuple[str, str, int, str], ...] = (
    # (what, alphabet, length, where it stands): random credentials whose form says nothing by itself
    ("hex, 32", "0123456789abcdef", 32, "api_key: {v}"),
    ("base62, 20", ALNUM, 20, "api_key: {v}"),
    ("base62, 40", ALNUM, 40, "client_secret = {v}"),
    ("base64, 40", B64, 40, "aws_secret_access_key = {v}"),
    ("letters, 20", string.ascii_letters, 20, "x-api-key: {v}"),
    ("letters, 12", string.ascii_letters, 12, "password: {v}"),
    ("lower case and digits, 16", string.ascii_lowercase + string.digits, 16, "TOKEN={v}"),
)


def random_recall(redactor: object, n: int = 1000, seed: int = 31) -> dict[str, float]:
    """For random values of each alphabet and length (:data:`RANDOM_VALUES`), the share removed whole
    by ``redactor.text`` where a key or password stands: what the entropy and word tests cost in recall."""
    g = _Gen(seed)
    out: dict[str, float] = {}
    for what, alphabet, length, place in RANDOM_VALUES:
        values = [g.chars(length, alphabet) for _ in range(n)]
        caught = sum(not leaked(v, redactor.text(place.format(v=v))) for v in values)  # type: ignore[attr-defined]
        out[what] = caught / n
    return out
