"""An agent that prints every fake secret of the corpus, its agents.yaml env secret, and
that secret base64- and hex-encoded, and its DEPLOY_KEY (a name that does not look secret)
among terminal escapes. Its first attempt then fails without committing, so
the next attempt's prompt carries its notes; the next remembers the env secret (through
`octopoid memory add`) and commits with secrets in its commit message, so review and
accept meet them too."""

import base64
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.helpers.secrets_corpus import fake_secrets

token, deploy = os.environ["MY_SERVICE_TOKEN"], os.environ["DEPLOY_KEY"]
for secret in fake_secrets():
    print(f"debug: {secret.text}")
print(f"my service token is {token}")
print(f"\x1b]0;owned\x07\x1b[2Jthe deploy key\x07 is {deploy}\x9b\u202e\x00 in colour\x1b[0m")
encoded = base64.b64encode(("svc:" + token).encode()).decode()
print(f"as base64 {encoded} and hex {token.encode().hex()}")
if "## Previous Agent Notes" not in Path(os.environ["OCTOPOID_PROMPT_FILE"]).read_text():
    sys.exit(1)
aws = next(s.text for s in fake_secrets() if s.name == "aws id then secret")
subprocess.run(
    ["octopoid", "memory", "add", "Important Facts", f"deploys use {token}; {aws}; {deploy}"],
    check=True,
)
Path("feature.txt").write_text("the feature\n")
subprocess.run(["git", "add", "feature.txt"], check=True)
message = f"add the feature for {token} \x1b[31m{deploy}\n\ntested with {fake_secrets()[0].text}"
subprocess.run(["git", "commit", "-q", "-m", message], check=True)
