"""An agent that prints every fake secret of the corpus (and its agents.yaml env secret),
then fails without committing, so the next attempt's prompt carries its notes."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.helpers.secrets_corpus import fake_secrets

for secret in fake_secrets():
    print(f"debug: {secret.text}")
print(f"my service token is {os.environ['MY_SERVICE_TOKEN']}")
sys.exit(1)
