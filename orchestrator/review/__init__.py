"""A person's verdicts: accept, reject, close (verdicts.py), what follows done
(finishing.py), the reviewer's draft, a task's diff."""
