"""Flags shared by the provider and the registry (not reloaded on re-import)."""

in_stop_hook = False
