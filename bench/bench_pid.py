#!/usr/bin/env python3
"""How long ``sframe backtrace --pid`` keeps a busy process stopped, and what
the process notices.

Builds (gcc + gas ``--gsframe``) a program whose three threads spin through
three nested functions and count the SIGUSR1 they handle, then attaches to
it N times the way ``sframe backtrace --pid`` does (survey, stop and copy,
let go, walk the copy; the modules are opened once, before the first) while another thread sends
SIGUSR1 every millisecond. Prints, from this one run:

* the stop time per attach (``Snapshot.stopped_seconds``: the longest any
  thread was stopped, from the poll before the one that saw its stop to its
  detach; each thread is let go once its own copy is made): min / median /
  max, target under 50 ms;
* the whole attach (survey, stop, walk of every thread) per attach;
* SIGUSR1 handled of those sent, during the attaches and, for comparison,
  by a second copy of the program that nobody attaches to (standard signals
  sent while one is pending merge, so a long stop loses many);
* the stop had every thread been held until the last one had stopped and
  been copied, as before (the sum of the phases below, same attaches);
* the stop with and without ``snapshot(boost=...)`` (every other attach);
* where the time goes (``Snapshot.phases``): waiting for the threads to
  enter their stops (they still run meanwhile: on a loaded machine they wait
  for a CPU), copying registers and stacks, detaching; median and max of
  each, and the phases of the attach with the longest stop.

``--load N`` runs N more busy loops (processes) meanwhile, so the machine
has more runnable threads than CPUs, as on a loaded machine.

    python -m bench.bench_pid [--attaches 50] [--interval 0.02] [--load 4]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sframe_core.targets.backtrace import module_table, trace_target
from sframe_core.targets.ptrace import BOOST, snapshot, survey

PROGRAM = r"""
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
static atomic_long handled;
static volatile sig_atomic_t done;
static void on_usr1(int s) { (void)s; atomic_fetch_add(&handled, 1); }
static void on_term(int s) { (void)s; done = 1; }
__attribute__((noinline)) long spin3(long x) { for (int i = 0; i < 1000; i++) x = x * 31 + i; return x; }
__attribute__((noinline)) long spin2(long x) { return spin3(x) + 1; }
__attribute__((noinline)) long spin1(long x) { return spin2(x) + 1; }
static void *work(void *arg) { long x = 0; while (!done) x = spin1(x); return arg; }
int main(void) {
    struct sigaction sa = {0};
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, 0);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, 0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, work, 0);
    printf("READY %d\n", getpid());
    fflush(stdout);
    long x = 0;
    while (!done) x = spin1(x);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    printf("HANDLED %ld\n", atomic_load(&handled));
    return (int)(x & 0);
}
"""


def _may_boost() -> bool:
    old = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, old - 1)
    except OSError:
        return False
    os.setpriority(os.PRIO_PROCESS, 0, old)
    return True


def start(program: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(program)], stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != f"READY {proc.pid}\n":
        raise SystemExit(f"bench: the program said {line!r}")
    return proc


def finish(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return int(out.split()[-1])


class Sender(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.sent, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            os.kill(self.pid, signal.SIGUSR1)
            self.sent += 1
            time.sleep(0.001)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attaches", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.02,
                        help="seconds the process runs between two attaches")
    parser.add_argument("--load", type=int, default=0,
                        help="busy-loop processes run meanwhile (a loaded machine)")
    args = parser.parse_args()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                stdin=subprocess.DEVNULL) for _ in range(args.load)]
    try:
        return _run(args)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def _run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "busy.c"
        src.write_text(PROGRAM)
        program = Path(tmp) / "busy"
        subprocess.run(["gcc", "-O1", "-pthread", "-Wa,--gsframe", "-o", str(program), str(src)],
                       check=True)
        proc = start(program)
        stops: list[float] = []
        totals: list[float] = []
        stacks: list[int] = []
        phases: list[dict[str, float]] = []
        boosted: list[bool] = []
        frames = 0
        # The files are read once, as a debugging session would: the CLI reads
        # them again for every command, before stopping the process.
        t0 = time.perf_counter()
        modules = module_table(survey(proc.pid).mappings)
        for module in modules.modules:
            module.sframe  # noqa: B018 - opened before stopping, as the CLI does
        trace_target(snapshot(survey(proc.pid)), modules=modules)
        first = time.perf_counter() - t0
        sender = Sender(proc.pid)
        sender.start()
        for _ in range(args.attaches):
            t0 = time.perf_counter()
            info = survey(proc.pid)
            boost = len(stops) % 2 == 0
            copy = snapshot(info, boost=boost)
            boosted.append(boost)
            traces = trace_target(copy, modules=modules)
            totals.append(time.perf_counter() - t0)
            stops.append(copy.stopped_seconds)
            phases.append(dict(copy.phases))
            stacks.append(copy.stack_bytes)
            frames += sum(len(t.frames) for t in traces)
            time.sleep(args.interval)
        sender.stop.set()
        sender.join()
        time.sleep(0.1)
        handled = finish(proc)

        quiet = start(program)
        baseline = Sender(quiet.pid)
        baseline.start()
        time.sleep(sum(totals) + args.interval * args.attaches)
        baseline.stop.set()
        baseline.join()
        time.sleep(0.1)
        handled_quiet = finish(quiet)

    ms = [s * 1e3 for s in stops]
    print(f"process:  3 threads spinning in spin3 <- spin2 <- spin1; {args.attaches} attaches, "
          f"{frames / args.attaches:.1f} frames per attach, "
          f"{statistics.median(stacks) / 1024:.0f} KiB of stack copied")
    print(f"stopped:  min {min(ms):6.2f} ms   median {statistics.median(ms):6.2f} ms   "
          f"max {max(ms):6.2f} ms per attach (target < 50 ms)")
    print(f"attach:   first {first:6.2f} s (opening the files and DWARF CFI, process running), "
          f"then median {statistics.median(totals) * 1e3:6.1f} ms per attach (stop, copy, walk "
          "of every thread)")
    held = [sum(p.values()) * 1e3 for p in phases]
    print(f"held:     min {min(held):6.2f} ms   median {statistics.median(held):6.2f} ms   "
          f"max {max(held):6.2f} ms per attach had every thread stayed stopped until the "
          f"last had stopped and been copied (as before); now {statistics.median(ms):.2f} / "
          f"{max(ms):.2f} ms, {statistics.median(held) / statistics.median(ms):.1f}x shorter "
          "at the median")
    for flag, label in ((True, "boosted"), (False, "not boosted")):
        each = [m for m, b in zip(ms, boosted, strict=True) if b is flag]
        if not each:
            continue
        print(f"  {label:12s} (every other attach) median {statistics.median(each):6.2f} ms   "
              f"max {max(each):6.2f} ms   (nice lowered by {BOOST} while stopped: "
              f"{'allowed' if _may_boost() else 'not allowed here, so no difference'})")
    for name in ("wait", "copy", "detach"):
        each = [p.get(name, 0.0) * 1e3 for p in phases]
        print(f"  {name:10s} median {statistics.median(each):7.2f} ms   max {max(each):7.2f} ms")
    worst = phases[ms.index(max(ms))]
    print("longest:  " + ", ".join(f"{name} {value * 1e3:.2f} ms" for name, value in worst.items()))
    print(f"load:     {args.load} busy loops besides; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"signals:  SIGUSR1 handled {handled} of {sender.sent} sent during the attaches; "
          f"{handled_quiet} of {baseline.sent} by the same program never attached to")
    return 0


if __name__ == "__main__":
    sys.exit(main())
