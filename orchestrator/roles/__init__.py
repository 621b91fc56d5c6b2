"""Roles: what an agent does with a claimed task, each a ``base.Role`` handed to the one
attempt runner (``attempt``, settled by ``outcome``); ``implementer`` is the first."""
