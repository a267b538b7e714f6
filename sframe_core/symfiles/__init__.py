"""Symbol files handed to the debuggers, their cache and the worker processes."""
