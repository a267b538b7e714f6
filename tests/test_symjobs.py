"""Symbol files from the cache only (``cached_symbol_file``), without function
symbols (gdb's), and made by a worker process (``symjobs.Job``)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from helpers import need
from helpers.gdbtools import fixture
from helpers.realprogs import DIR as REALPROGS

from sframe_core.base.errors import SFrameError
from sframe_core.symfiles.jobs import Job, JobResult, worker_python
from sframe_core.symfiles.symfile import cached_symbol_file, symbol_file_for

DEEP = fixture("x86_64", "busid-v3", "deep.noeh")
STRIPPED = fixture("x86_64", "busid-v3", "deep.noeh.stripped")


def _run(path: Path, cache: Path, **kwargs: bool) -> JobResult:
    done = threading.Event()
    results: list[JobResult] = []

    def on_done(result: JobResult) -> None:
        results.append(result)
        done.set()
    Job(str(path), on_done, cache=str(cache), **kwargs)
    assert done.wait(120), "the worker did not finish"
    assert len(results) == 1
    return results[0]


def _section_names(path: str) -> set[str]:
    with open(path, "rb") as stream:
        return {s.name for s in ELFFile(stream).iter_sections()}


def test_cached_symbol_file_never_generates(tmp_path: Path) -> None:
    deep = need(DEEP)
    assert cached_symbol_file(str(deep), cache=str(tmp_path)) is None
    assert list(tmp_path.iterdir()) == []
    made = symbol_file_for(str(deep), cache=str(tmp_path))
    hit = cached_symbol_file(str(deep), cache=str(tmp_path))
    assert hit is not None and hit.cached and hit.path == made.path
    # gdb's variant is another file of the cache, not this one.
    assert cached_symbol_file(str(deep), cache=str(tmp_path), function_symbols=False) is None


def test_no_function_symbols_for_gdb(tmp_path: Path) -> None:
    """A stripped module's symbol file names its FDEs for LLDB; gdb's has no
    such names (gdb would show them where the twin shows ??)."""
    stripped = str(need(STRIPPED))
    lldb = symbol_file_for(stripped, cache=str(tmp_path))
    gdb = symbol_file_for(stripped, cache=str(tmp_path), function_symbols=False)
    assert lldb.path != gdb.path
    assert ".symtab" in _section_names(lldb.path)
    assert ".symtab" not in _section_names(gdb.path)
    assert ".debug_frame" in _section_names(gdb.path)
    # Unstripped, both have the same sections and .debug_frame, but for the
    # entry function's FDE in an .eh_frame, which only LLDB reads (for the
    # frame at an expression call's return address).
    deep = str(need(DEEP))
    a = symbol_file_for(deep, cache=str(tmp_path))
    b = symbol_file_for(deep, cache=str(tmp_path), function_symbols=False)
    assert _section_names(a.path) == _section_names(b.path) | {".eh_frame"}
    assert _section_data(a.path, ".debug_frame") == _section_data(b.path, ".debug_frame")


def _section_data(path: str, name: str) -> bytes:
    with open(path, "rb") as stream:
        section = ELFFile(stream).get_section_by_name(name)
        assert section is not None, (path, name)
        return bytes(section.data())


def test_worker_makes_the_same_file(tmp_path: Path) -> None:
    assert worker_python() is not None
    result = _run(need(STRIPPED), tmp_path / "worker", function_symbols=False)
    assert result.error is None and result.path is not None, result
    here = symbol_file_for(str(need(STRIPPED)), cache=str(tmp_path / "here"),
                           function_symbols=False)
    assert Path(result.path).name == Path(here.path).name
    assert Path(result.path).read_bytes() == Path(here.path).read_bytes()
    hit = cached_symbol_file(str(need(STRIPPED)), cache=str(tmp_path / "worker"),
                             function_symbols=False)
    assert hit is not None and hit.path == result.path


def test_worker_error_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "not-elf"
    bogus.write_bytes(b"#!/bin/sh\necho hello\n")
    result = _run(bogus, tmp_path / "cache")
    assert result.path is None and result.error is not None
    assert result.error.startswith(str(bogus)) and "\n" not in result.error, result.error


def _large(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """``symbol_file_now`` sees every module as large enough for a worker,
    on two CPUs, with the cache in ``tmp_path``; returns the paths workers got."""
    from sframe_core.symfiles import jobs, workers

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(workers, "PARALLEL_MIN_FDES", 1)
    monkeypatch.setattr(workers, "NATIVE_SPLIT_MIN_FDES", 1)
    monkeypatch.setattr(workers, "default_jobs", lambda: 2)
    started: list[str] = []
    real = jobs.Job

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, path: str, *args: object, **kwargs: object) -> None:
            started.append(path)
            super().__init__(path, *args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(jobs, "Job", Counted)
    return started


def test_waited_for_file_of_a_large_module_comes_from_a_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an adapter that waits gets (gdb's ``foreground``, LLDB 21, LLDB 23
    with debug information): the file a worker made on every CPU, the same
    bytes as one made here, gdb's and LLDB 21's variants alike."""
    from sframe_core.symfiles.jobs import symbol_file_now

    started = _large(monkeypatch, tmp_path)
    for path, kwargs in ((need(STRIPPED), {"function_symbols": False}),
                         (need(DEEP), {"before_entry": True})):
        made = symbol_file_now(str(path), **kwargs)
        assert started[-1] == str(path) and made.cached  # the worker's, from the cache
        here = symbol_file_for(str(path), cache=str(tmp_path / "here"), **kwargs)
        assert Path(made.path).name == Path(here.path).name
        assert Path(made.path).read_bytes() == Path(here.path).read_bytes()
    assert len(started) == 2


def test_waited_for_file_without_a_worker_is_made_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that cannot start leaves the module to this process; a module
    that cannot be read says what is wrong in one line, as ``symbol_file_for``."""
    from sframe_core.symfiles import jobs
    from sframe_core.symfiles.jobs import symbol_file_now

    started = _large(monkeypatch, tmp_path)
    monkeypatch.setattr(jobs, "worker_python", lambda: None)
    made = symbol_file_now(str(need(DEEP)))
    assert started == [str(need(DEEP))] and not made.cached
    bogus = tmp_path / "not-elf"
    bogus.write_bytes(b"#!/bin/sh\necho hello\n")
    with pytest.raises(SFrameError) as raised:
        symbol_file_now(str(bogus))
    with pytest.raises(SFrameError) as plain:
        symbol_file_for(str(bogus))
    assert str(raised.value) == str(plain.value)
    assert str(raised.value).startswith(str(bogus)) and "\n" not in str(raised.value)


LUA = REALPROGS / "lua5.4" / "busid-v3" / "lua5.4.noeh"


@pytest.mark.parametrize("jobs,reports", [
    (1, list(range(64, 705, 64))),  # in-process: every 64 FDEs
    (2, [128, 256, 384, 512, 640]),  # parts of 128 FDEs, as each comes back in order
])
def test_progress_is_told_from_the_start_of_the_fdes(tmp_path: Path, jobs: int,
                                                     reports: list[int],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker tells when its FDEs' work begins (0), then how far it is:
    ``Job.remaining`` times the pace from that moment, not from the
    worker's start-up (lua5.4's 705 FDEs, -O2 -g; split between processes
    as if the C did not make its FDEs)."""
    from sframe_core.symfiles import workers

    monkeypatch.setattr(workers, "NATIVE_SPLIT_MIN_FDES", workers.PARALLEL_MIN_FDES)
    told: list[tuple[int, int]] = []
    symbol_file_for(str(need(LUA)), cache=str(tmp_path), jobs=jobs,
                    progress=lambda done, of: told.append((done, of)))
    assert told == [(0, 705)] + [(done, 705) for done in reports]


def test_remaining_is_the_pace_since_the_fdes_began(monkeypatch: pytest.MonkeyPatch) -> None:
    from sframe_core.symfiles import jobs

    job = Job.__new__(Job)
    job.path, job.result, job._expected = str(need(LUA)), None, None
    job.started, job._begun, job._progress = 100.0, None, None
    monkeypatch.setattr(jobs.time, "monotonic", lambda: 100.2)
    # Before any report: the estimate from the size of the code, from the start.
    expected = jobs._expected_seconds(job.path)
    assert job.remaining() == pytest.approx(100.0 + expected - 100.2)
    # Begun at 100.3 (start-up over): the estimate without its start-up, from then.
    job._begun = 100.3
    monkeypatch.setattr(jobs.time, "monotonic", lambda: 100.35)
    assert job.remaining() == pytest.approx(100.3 + expected - jobs.WORKER_START_SECONDS - 100.35)
    # 128 of 705 done 0.02 s after the FDEs began, asked 0.01 s later: the
    # pace so far, sooner than a worker alone was expected to be.
    alone = (expected - jobs.WORKER_START_SECONDS) * 577 / 705
    job._progress = (128, 705, 100.32)
    monkeypatch.setattr(jobs.time, "monotonic", lambda: 100.33)
    assert 0.02 * 577 / 128 - 0.01 < alone
    assert job.remaining() == pytest.approx(0.02 * 577 / 128 - 0.01)
    # 128 done only 0.5 s after they began (the debugger's launch had the
    # CPUs): the rest at the pace of a worker alone, which a stop gives it.
    job._progress = (128, 705, 100.8)
    monkeypatch.setattr(jobs.time, "monotonic", lambda: 100.85)
    assert alone < 0.5 * 577 / 128 - 0.05
    assert job.remaining() == pytest.approx(alone)


@pytest.mark.parametrize("env,running,bound", [
    (None, 0.15, 0.075),  # gdb at a small program's first stop: half its age
    (None, 7.0, 0.5),  # later: STOP_WAIT_SECONDS
    ("120", 0.15, 120.0),  # the variable: absolute (the tests that always wait)
    ("0", 7.0, 0.0),  # never wait
    ("soon", 7.0, 0.5),  # not a number: as unset
])
def test_a_stop_waits_no_longer_than_half_the_debugger_has_run(
        monkeypatch: pytest.MonkeyPatch, env: str | None, running: float, bound: float) -> None:
    from sframe_core.symfiles import jobs

    if env is None:
        monkeypatch.delenv(jobs.STOP_WAIT_ENV, raising=False)
    else:
        monkeypatch.setenv(jobs.STOP_WAIT_ENV, env)
    monkeypatch.setattr(jobs, "_process_seconds", lambda: running)
    assert jobs.stop_wait() == pytest.approx(bound)


def test_process_seconds_is_this_process_age() -> None:
    import subprocess
    import sys

    age = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5); "
                          "from sframe_core.symfiles.jobs import _process_seconds; "
                          "print(_process_seconds())"], capture_output=True, text=True, check=True)
    assert 0.5 <= float(age.stdout) < 30, age.stdout


def test_a_worker_is_expected_sooner_where_the_c_analysis_serves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The size estimate (before a worker reports) takes the C analysis's
    pace on amd64 where it is built, the Python's elsewhere and without it."""
    from sframe_core.analysis import native
    from sframe_core.symfiles import jobs

    monkeypatch.setattr(native, "built", lambda: True)
    assert jobs._per_code_byte("amd64") == jobs.SECONDS_PER_CODE_BYTE_NATIVE
    assert jobs._per_code_byte("aarch64") == jobs.SECONDS_PER_CODE_BYTE
    monkeypatch.setattr(native, "built", lambda: False)
    assert jobs._per_code_byte("amd64") == jobs.SECONDS_PER_CODE_BYTE
    monkeypatch.undo()
    monkeypatch.setenv(native.ENV, "0")
    assert not native.built()
