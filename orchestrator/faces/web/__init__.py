"""The review page (`octopoid web`): a face like cli.py, over the same functions."""
