"""Run a command and print the peak resident memory (KiB) of it and every process it waited
for: ``peak_rss.py OUT CMD...`` (its stdout goes to the file OUT). A fresh process, so no
earlier child of the test's own process counts."""

import resource
import subprocess
import sys

with open(sys.argv[1], "wb") as out:
    done = subprocess.run(sys.argv[2:], stdout=out, check=False)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(done.returncode)
