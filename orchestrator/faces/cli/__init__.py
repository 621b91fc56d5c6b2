"""`octopoid`: click commands (main.py holds the group; one module per command
family). Parse, call one function below, print."""
