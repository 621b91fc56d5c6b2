"""Every git call octopoid makes (GitPython, hooks off), and what a merge may touch."""
