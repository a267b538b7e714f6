"""The worker processes making symbol files, one per build of a module.

Started from the locate-module callback (``locate.py``, from the moment LLDB
knows a module) or from the stop-hook (``symfiles.py``), whichever comes
first, and read by the stop-hook at the stops after: so they stand below
both, and make no SB call.
"""

from __future__ import annotations

import os

from sframe_core.base import settings
from sframe_core.symfiles.jobs import Job

from .state import SETTING_ENV, late_add_keeps_types, providers_supported, symbol_file_options

__all__ = ["start_job", "job_for", "in_background"]

# (realpath, size, mtime) of a module -> the worker making its symbol file
# (one per build of a module and session, whichever target or callback asked
# first; a rebuild at the same path is another module, with its own worker).
_jobs: dict[tuple[str, int, int], Job] = {}


def _job_key(path: str) -> tuple[str, int, int]:
    real = os.path.realpath(path)
    st = os.stat(real)
    return (real, st.st_size, st.st_mtime_ns)


def start_job(path: str) -> Job:
    """The worker making ``path``'s symbol file, started now if none is.

    Makes no SB call (the locate-module callback starts it too): the result
    is only stored by the worker's thread, and taken at a stop.
    """
    key = _job_key(path)
    job = _jobs.get(key)
    if job is None:
        job = _jobs[key] = Job(key[0], lambda result: None, **symbol_file_options())
    return job


def job_for(path: str) -> Job | None:
    try:
        return _jobs.get(_job_key(path))
    except OSError:
        return None


def in_background(path: str) -> bool:
    """Is ``path``'s missing symbol file made by a worker while the provider
    serves (rather than before LLDB goes on)? Not on an LLDB without frame
    providers (21): nothing would serve its frames meanwhile. Nor for a
    module with debug information on an LLDB that cannot take its file late
    (23, ``late_add_keeps_types``): the provider would serve it for the whole
    session, and its frames have no register context (arguments and
    variables of callers unavailable, marked synthetic), where waiting once
    gives the twin's session."""
    if settings.choice(SETTING_ENV) == "foreground":
        return False
    if not providers_supported():
        return False
    from sframe_core.symfiles.jobs import made_at_once
    from sframe_core.symfiles.symfile import has_debug_information
    if made_at_once(path):
        return False
    return late_add_keeps_types() or not has_debug_information(path)
