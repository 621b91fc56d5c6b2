"""The task and the words every layer shares: Task, TaskState, ids, headers, errors,
defaults. Imports nothing of octopoid above it."""
