"""Roles: what an agent does with a claimed task. ``implementer`` is the first."""
