"""The queue: the state machine (machine.py, one function per legal move), claims and
leases, creation (intake), retry notes, records, and the stores below it (store/)."""
