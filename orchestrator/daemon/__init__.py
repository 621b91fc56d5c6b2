"""The daemon: dispatch and runners (scheduler.py), the fork server, wake-ups, why
nothing is claimed (stalls.py), agents' pauses and spend, alerts."""
