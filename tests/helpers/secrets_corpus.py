"""Fake secrets in 60 real shapes, and ordinary output that must survive redaction.

The secrets are built at test time from a seeded random, in the right alphabet and length,
so none sits in the repo for a secret scanner to flag. Each one appears in the context it
would have in an agent's output (a curl line, an .npmrc, a JSON string, an env dump).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import random
import string
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
UPPER = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
PASSWORD = ALNUM + "!$&*()+,;=%~"
PRIVATE = "PRIVATE"  # kept apart from "KEY" so this file holds no key header to flag


@dataclass(frozen=True)
class FakeSecret:
    name: str  # what it imitates
    kind: str  # the marker it must become: [REDACTED:<kind>]
    text: str  # how it appears in output
    secret: str  # the part of ``text`` that must not survive, nor any 12 characters of it


class Maker:
    """Random strings of a given alphabet and length, from one seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, length: int, alphabet: str = ALNUM) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(length))

    def b64(self, length: int, urlsafe: bool = False) -> str:
        data = self.rng.randbytes(length)
        encoded = base64.urlsafe_b64encode(data) if urlsafe else base64.b64encode(data)
        return encoded.decode().rstrip("=") if urlsafe else encoded.decode()


def fake_secrets(seed: int = 7) -> list[FakeSecret]:
    """60 fake secrets, each in its context."""
    r = Maker(seed)
    found = [*tokens(r), *cloud_keys(r), *urls_with_passwords(r), *key_blocks(r)]
    found += [*more_tokens(r), *by_context(r)]
    return [
        FakeSecret(name, kind, text.format(s=secret), secret) for name, kind, text, secret in found
    ]


DIGITS = string.digits

#: orchestrator/redaction.py before it scanned each chunk in one pass (issue 25): what the
#: equivalence tests and scripts/bench_redaction.py compare the current one with.
BEFORE_SINGLE_PASS = "71a2fcdc14bf87e2766b9f7ee443f3505491146c"


def redaction_at(commit: str = BEFORE_SINGLE_PASS) -> ModuleType | None:
    """orchestrator/redaction.py as it was at ``commit``, imported beside the current one;
    None where git or that commit is missing (a shallow clone)."""
    root = Path(__file__).resolve().parents[2]
    show = ["git", "-C", str(root), "show", f"{commit}:orchestrator/redaction.py"]
    try:
        source = subprocess.run(show, capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    spec = importlib.util.spec_from_loader(f"orchestrator.redaction_{commit[:7]}", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "orchestrator"  # its imports of config are relative
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(source, f"redaction@{commit[:7]}", "exec"), module.__dict__)
    return module


def tokens(r: Maker) -> list[tuple[str, str, str, str]]:
    slack_bot = f"xoxb-{r(12, DIGITS)}-{r(13, DIGITS)}-{r(24)}"
    slack_user = f"xoxp-{r(12, DIGITS)}-{r(12, DIGITS)}-{r(13, DIGITS)}-{r(32, HEX)}"
    legacy_npm = str(uuid.UUID(int=r.rng.getrandbits(128)))
    return [
        ("github classic", "github-token", "git push (token {s}) ok", "ghp_" + r(36)),
        ("github oauth", "github-token", '{{"access_token": "{s}"}}', "gho_" + r(36)),
        ("github fine-grained", "github-token", "GH_TOKEN={s}", f"github_pat_{r(22)}_{r(59)}"),
        ("openai legacy", "openai-key", "key: {s}", f"sk-{r(20)}T3BlbkFJ{r(20)}"),
        ("openai project", "openai-key", 'OpenAI(api_key="{s}")', "sk-proj-" + r(156, URLSAFE)),
        ("anthropic", "anthropic-key", "x-api-key: {s}", f"sk-ant-api03-{r(93, URLSAFE)}AA"),
        ("slack bot", "slack-token", "SLACK_BOT={s}", slack_bot),
        ("slack user", "slack-token", "token {s}", slack_user),
        ("stripe secret", "stripe-key", "stripe.api_key = '{s}'", "sk_live_" + r(99)),
        ("stripe restricted", "stripe-key", "STRIPE_KEY={s}", "rk_live_" + r(24)),
        ("jwt after bearer", "jwt", "Authorization: Bearer {s}", jwt(r)),
        ("opaque bearer", "bearer-token", "curl -H 'Authorization: Bearer {s}'", r(40, URLSAFE)),
        ("npm", "npm-token", "//registry.npmjs.org/:_authToken={s}", "npm_" + r(36)),
        ("npm legacy", "npm-token", "//registry.npmjs.org/:_authToken={s}", legacy_npm),
        ("sendgrid", "sendgrid-key", "SENDGRID={s}", f"SG.{r(22, URLSAFE)}.{r(43, URLSAFE)}"),
        ("twilio api key", "twilio-key", "TWILIO_API_KEY_SID={s}", "SK" + r(32, HEX)),
        ("gitlab", "gitlab-token", "https://oauth2:{s}@gitlab.com/g/p.git", "glpat-" + r(20)),
        ("pypi", "pypi-token", "password = {s}", "pypi-AgEIcHlwaS5vcmc" + r(140, URLSAFE)),
        ("square", "square-oauth", "SQUARE_SECRET={s}", "sq0csp-" + r(43, URLSAFE)),
    ]


def cloud_keys(r: Maker) -> list[tuple[str, str, str, str]]:
    webhook = f"https://hooks.slack.com/services/T{r(8, UPPER)}/B{r(10, UPPER)}/{r(24)}"
    azure = "DefaultEndpointsProtocol=https;AccountName=acct;{s};EndpointSuffix=core.windows.net"
    return [
        ("aws access key id", "aws-access-key", "aws_access_key_id = {s}", "AKIA" + r(16, UPPER)),
        ("aws secret key", "aws-secret-key", "aws_secret_access_key = {s}", r(40, ALNUM + "/+")),
        ("aws sts json", "aws-secret-key", '"SecretAccessKey": "{s}",', r(40, ALNUM + "/+")),
        ("google api key", "google-api-key", "maps/api/js?key={s}", "AIza" + r(35, URLSAFE)),
        ("azure storage", "azure-storage-key", azure, "AccountKey=" + r.b64(66)),
        ("slack webhook", "slack-token", "curl -X POST {s} -d @msg.json", webhook),
    ]


def more_tokens(r: Maker) -> list[tuple[str, str, str, str]]:
    bech32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l".upper()
    xapp = f"xapp-1-A{r(10, UPPER)}-{r(13, DIGITS)}-{r(64, HEX)}"
    mapbox = f"sk.eyJ1IjoiYWRhIiwiYSI6I{r(20, URLSAFE)}.{r(22, URLSAFE)}"
    return [
        ("github app", "github-token", "x-access-token {s}", "ghs_" + r(36)),
        ("github refresh", "github-token", "refresh={s}", "ghr_" + r(76)),
        ("gitlab deploy", "gitlab-token", "deploy token {s}", "gldt-" + r(20)),
        ("gitlab runner", "gitlab-token", "runner token: {s}", "glrt-" + r(20)),
        ("anthropic admin", "anthropic-key", "admin {s}", f"sk-ant-admin01-{r(93, URLSAFE)}AA"),
        ("slack app", "slack-token", "app token {s}", xapp),
        ("google oauth secret", "google-oauth-secret", "secret {s}", "GOCSPX-" + r(28, URLSAFE)),
        (
            "huggingface",
            "huggingface-token",
            "huggingface-cli login --token {s}",
            "hf_" + r(34, string.ascii_letters),
        ),
        ("databricks", "databricks-token", "token = {s}", "dapi" + r(32, HEX)),
        ("digitalocean", "digitalocean-token", "doctl auth init -t {s}", "dop_v1_" + r(64, HEX)),
        ("shopify", "shopify-token", "X-Shopify-Access-Token: {s}", "shpat_" + r(32, HEX)),
        ("linear", "linear-key", "linear key {s}", "lin_api_" + r(40)),
        ("stripe webhook", "stripe-webhook-secret", "endpoint secret {s}", "whsec_" + r(32)),
        ("sentry", "sentry-token", "sentry-cli --auth-token {s}", "sntrys_" + r(60, URLSAFE)),
        ("planetscale", "planetscale-token", "pw {s}", "pscale_pw_" + r(43, URLSAFE)),
        ("postman", "postman-key", "postman {s}", f"PMAK-{r(24, HEX)}-{r(34, HEX)}"),
        ("age", "age-secret-key", "# key: {s}", "AGE-SECRET-KEY-1" + r(58, bech32)),
        ("vault", "vault-token", "vault login {s}", "hvs." + r(90, URLSAFE)),
        (
            "terraform cloud",
            "terraform-token",
            '"token": "{s}"',
            f"{r(14)}.atlasv1.{r(67, URLSAFE)}",
        ),
        ("grafana", "grafana-token", "grafana {s}", f"glsa_{r(32)}_{r(8, HEX)}"),
        ("docker hub", "docker-token", "docker login -u ada -p {s}", "dckr_pat_" + r(27, URLSAFE)),
        ("supabase", "supabase-token", "supabase {s}", "sbp_" + r(40, HEX)),
        ("atlassian", "atlassian-token", "jira {s}", "ATATT3xFfGF0" + r(180, URLSAFE)),
        ("new relic", "newrelic-key", "newrelic {s}", "NRAK-" + r(27, UPPER)),
        ("doppler", "doppler-token", "doppler {s}", "dp.st.prd." + r(43)),
        ("pulumi", "pulumi-token", "pulumi login {s}", "pul-" + r(40, HEX)),
        ("mapbox", "mapbox-token", "mapbox {s}", mapbox),
    ]


def by_context(r: Maker) -> list[tuple[str, str, str, str]]:
    aws_id = "AKIA" + r(16, UPPER)
    basic = base64.b64encode(f"ada:{r(16)}".encode()).decode()
    return [
        ("aws id then secret", "aws-secret-key", f"aws {aws_id} secret {{s}}", r(40, ALNUM + "/+")),
        ("aws session token", "aws-session-token", "aws_session_token = {s}", r(300, ALNUM + "/+")),
        ("basic auth", "basic-auth", "Authorization: Basic {s}", basic),
        ("sshpass", "cli-password", "sshpass -p '{s}' ssh deploy@host", r(14, PASSWORD)),
        ("mysql -p", "cli-password", "mysql -u root -p{s} shop", r(12)),
        ("curl -u", "cli-password", "curl -u ada:{s} https://api.example.com", r(18)),
        ("env dump", "env-secret", "export DB_PASSWORD={s}", r(20, PASSWORD)),
        ("json secret", "json-secret", '{{"clientSecret": "{s}"}}', r(34, URLSAFE)),
    ]


def urls_with_passwords(r: Maker) -> list[tuple[str, str, str, str]]:
    return [
        ("postgres", "url-password", "postgres://app:{s}@db.internal:5432/app", r(20, PASSWORD)),
        ("mysql", "url-password", "mysql://root:{s}@localhost:3306/shop", r(16, PASSWORD)),
        ("mongodb", "url-password", "mongodb+srv://admin:{s}@c0.ab1cd.mongodb.net/p", r(24)),
        ("redis", "url-password", "REDIS_URL=redis://:{s}@cache.internal:6379/0", r(32, HEX)),
    ]


def key_blocks(r: Maker) -> list[tuple[str, str, str, str]]:
    in_json = pem("RSA", r.b64(600), 64).replace("\n", "\\n")
    return [
        ("pem rsa", "private-key", "{s}", pem("RSA", r.b64(1190), 64)),
        ("pem ec", "private-key", "{s}", pem("EC", r.b64(121), 64)),
        ("openssh", "private-key", "{s}", pem("OPENSSH", r.b64(400), 70)),
        ("pkcs8 encrypted", "private-key", "{s}", pem("ENCRYPTED", r.b64(1250), 64)),
        ("pgp", "private-key", "{s}", pgp(r)),
        ("pem in json", "private-key", '{{"type": "tool_result", "content": "{s}\\n"}}', in_json),
    ]


def pem(label: str, body: str, width: int) -> str:
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    tag = f"{label} {PRIVATE} KEY-----"
    return "\n".join([f"-----BEGIN {tag}", *lines, f"-----END {tag}"])


def pgp(r: Maker) -> str:
    tag = f"PGP {PRIVATE} KEY BLOCK-----"
    body = r.b64(900)
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join(
        [f"-----BEGIN {tag}", "Version: GnuPG v2", "", *lines, "=" + r(4), f"-----END {tag}"]
    )


def jwt(r: Maker) -> str:
    def part(claims: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")

    payload = {"sub": r(12), "name": "Ada", "iat": 1700000000 + r.rng.randrange(10**6)}
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(payload)}.{r.b64(32, urlsafe=True)}"


def ordinary_output(seed: int = 11) -> str:
    """Agent output with no secret in it: code, a diff, a traceback, ids and an image."""
    r = Maker(seed)
    shas = [r(40, HEX) for _ in range(3)]
    uuids = [str(uuid.UUID(int=r.rng.getrandbits(128))) for _ in range(3)]
    image = base64.b64encode(b"\x89PNG\r\n\x1a\n" + r.rng.randbytes(3000)).decode()
    lines = "\n".join(image[i : i + 76] for i in range(0, len(image), 76))
    ids = {f"sha{i + 1}": sha for i, sha in enumerate(shas)}
    ids.update({f"uuid{i + 1}": u for i, u in enumerate(uuids)})
    return ORDINARY.format(image=lines, **ids)


ORDINARY = """\
tool_use: edit src/app.py -> ok ✓ 🐙 café naïve 日本語
commit {sha1}
Author: Ada Lovelace <ada@example.com>
Merge: {sha2} {sha3}

diff --git a/orchestrator/queue_utils.py b/orchestrator/queue_utils.py
index {sha2}..{sha3} 100644
--- a/orchestrator/queue_utils.py
+++ b/orchestrator/queue_utils.py
@@ -12,7 +12,8 @@ def claim_task(role: str | None, agent: str) -> Task | None:
-    task = store.claim(role, agent, lease_seconds=LEASE_SECONDS)
+    task = store.claim(role, agent, lease_seconds=cfg["lease_seconds"])  # TASK-42
+    password = os.environ["DB_PASSWORD"]  # read at run time, never logged
     headers = {{"Authorization": f"Bearer {{token}}", "Accept": "application/json"}}
     url = f"postgres://{{user}}:{{password}}@{{host}}/app"
Traceback (most recent call last):
  File "/home/dev/project/tests/test_queue.py", line 88, in test_claim_respects_blockers
    assert q.claim_task(None, "impl-1").id == "task-12"
AssertionError: assert 'task-13' == 'task-12'
fetching https://github.com/octopoid/octopoid/pull/57 and http://localhost:8080/health
request ids {uuid1} {uuid2} {uuid3}
AWS_REGION=eu-west-1 AWS_PROFILE=dev TASK_ACCESS=rw python -m pytest -q -k "not slow"
the access key id is read from AWS_ACCESS_KEY_ID; see https://docs.aws.amazon.com/
data:image/png;base64,
{image}
=== 3 passed, 1 skipped in 0.42s ===
"""


def corpus() -> str:
    """Every fake secret on a line among ordinary output, beside multi-byte characters."""
    ordinary = ordinary_output().splitlines(keepends=True)
    secrets = fake_secrets()
    lines = [f"{ordinary[i % len(ordinary)]}🐙 é {s.text} ✓\n" for i, s in enumerate(secrets)]
    return "".join(lines) + ordinary_output()


def code_like_output() -> str:
    """Code, a diff, a traceback and URLs, as an agent prints them: a secret's anchor every
    ~100 bytes (``Bearer``, ``AWS_``, ``://``, ``task-``), and no secret."""
    return CODE_LIKE


CODE_LIKE = """\
diff --git a/orchestrator/queue_utils.py b/orchestrator/queue_utils.py
index 3f786850e387550fdab836ed7e6dc881de23001b..89e6c98d92887913cadf06b2adb97f26cde4849b
@@ -12,7 +12,8 @@ def claim_task(role: str | None, agent: str) -> Task | None:
-    task = store.claim(role, agent, lease_seconds=LEASE_SECONDS)
+    task = store.claim(role, agent, lease_seconds=cfg["lease_seconds"])  # see TASK-42 ✓
     if task is None:
Traceback (most recent call last):
  File "/home/dev/project/tests/test_queue.py", line 88, in test_claim_respects_blockers
    assert q.claim_task(None, "impl-1").id == "task-12"
AssertionError: assert 'task-13' == 'task-12'
fetching https://github.com/octopoid/octopoid/pull/57 (id 123e4567-e89b-12d3-a456-426614174000) 🐙
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    AWS_REGION=eu-west-1 TASK_ACCESS=rw python -m pytest -q tests/e2e -k "not slow"
"""
