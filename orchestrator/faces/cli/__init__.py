"""`octopoid`: click commands. main.py holds the group, registry.py names every command and
the module that defines it (one module per idea), render.py prints. Parse, call one
function below, print."""
