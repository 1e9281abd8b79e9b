"""How many CPU threads each decode step uses.

A desktop is never idle. llama.cpp's OpenMP workers spin at a barrier, so when another process
takes a core, a step with as many threads as cores waits for a descheduled worker and decode
collapses; one thread fewer holds up, but leaves speed unused when the machine is idle. No fixed
setting wins both, so the adaptive policy measures: it decodes with the current thread count,
now and then runs a few steps with another count, and keeps whichever was faster. A sudden
slowdown of the current setting (a neighbour started) triggers a probe at once; probes that
lose come less and less often, so their cost fades when nothing changes. While it runs fewer
threads than it may, it looks at the CPUs' idle time now and then: when a neighbour that had
taken a core goes away, a core goes idle, and a probe of more threads follows at once instead of
at the next, by then rare, scheduled probe.

Only decode steps (no prompt in the batch) are measured, and only against steps with the same
number of rows, so a change in load is not mistaken for a change in speed. Settings are compared
by their mean step time, not the median: a contended setting is fast on most steps and very slow
on some, and the slow ones are what throughput pays for. The first step of a probe is not
counted: a new thread count wakes or parks workers then.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path


def physical_cores() -> int:
    """Physical cores (what llama.cpp uses by default): SMT siblings share one core's memory path."""
    try:
        cores = set()
        physical = core = None
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "physical id":
                physical = value.strip()
            elif key == "core id":
                core = value.strip()
            elif not key and physical is not None and core is not None:
                cores.add((physical, core))
                physical = core = None
        if physical is not None and core is not None:
            cores.add((physical, core))
        if cores:
            return min(len(cores), len(os.sched_getaffinity(0)))
    except (OSError, AttributeError):
        pass
    return max(1, os.cpu_count() or 1)


def cpu_idle_seconds() -> Callable[[], float] | None:
    """A reader of the idle seconds so far of the CPUs this process may run on, from Linux's
    /proc/stat (None elsewhere). Time stolen by the hypervisor is not idle: it is not ours to use."""
    try:
        names = {f"cpu{n}".encode() for n in os.sched_getaffinity(0)}
        ticks_per_second = os.sysconf("SC_CLK_TCK")
        Path("/proc/stat").read_bytes()
    except (OSError, AttributeError, ValueError):
        return None

    def read() -> float:
        ticks = 0
        for line in Path("/proc/stat").read_bytes().splitlines()[1:]:
            if not line.startswith(b"cpu"):
                break
            fields = line.split()
            if fields[0] in names:
                ticks += int(fields[4]) + int(fields[5])  # idle, iowait
        return ticks / ticks_per_second

    return read


class ThreadPolicy:
    """A fixed thread count, or adaptive between 1 and `max_threads` (see the module's text)."""

    PROBE_STEPS = 8
    MIN_INTERVAL = 16
    MAX_INTERVAL = 512
    SWITCH_GAIN = 0.95  # a probe must be at least 5% faster to win
    SLOWDOWN = 1.3  # the current setting this much slower than measured: probe now
    SPARE_EVERY = 32  # decode steps between looks at idle CPU time, while below max_threads
    SPARE_SHARE = 0.75  # of each thread a probe would add, idle on average: probe now

    def __init__(self, max_threads: int, *, adaptive: bool, apply: Callable[[int], None],
                 idle_seconds: Callable[[], float] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.max_threads = max_threads
        self.adaptive = adaptive and max_threads > 1
        self._apply = apply
        self.candidates = tuple(sorted({max_threads, max(1, max_threads // 2), 1}, reverse=True))
        self.current = max_threads
        self._applied = 0
        self._rows = -1
        self._recent: deque[float] = deque(maxlen=2 * self.PROBE_STEPS)
        self._reference = 0.0
        self._probe_threads = 0
        self._probe: list[float] = []
        self._probe_warming = False
        self._interval = self.MIN_INTERVAL
        self._countdown = self.MIN_INTERVAL
        self._next_candidate = 0
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._window: tuple[float, float] | None = None  # (clock, idle seconds) at the window's start
        self._window_busy = 0.0  # seconds of decode in the window
        self._window_steps = 0
        self._cores_were_busy = False  # in the last window looked at: no room for more threads
        self._set(max_threads)

    def describe(self) -> str:
        if self.adaptive:
            return f"adaptive, {' / '.join(map(str, self.candidates))} threads by measured decode speed"
        return f"{self.max_threads} (fixed)"

    def context_changed(self) -> None:
        """A new context was made (with the most threads): the next step sets its count again."""
        self._applied = 0

    def _set(self, threads: int) -> None:
        if threads != self._applied:
            self._apply(threads)
            self._applied = threads

    def before_step(self, *, prefill: bool) -> None:
        """Set the thread count for the coming step."""
        if not self.adaptive:
            return
        self._set(self._probe_threads if (self._probe_threads and not prefill) else self.current)

    def after_step(self, seconds: float, *, rows: int, prefill: bool) -> None:
        if not self.adaptive or prefill:
            return
        if rows != self._rows:  # another load: earlier timings do not compare
            self._rows = rows
            self._recent.clear()
            self._probe_threads, self._probe = 0, []
            self._countdown = min(self._countdown, self.MIN_INTERVAL)
            self._window = None
            return
        if self._probe_threads:
            if self._probe_warming:  # the first step with another count wakes or parks workers
                self._probe_warming = False
                return
            self._probe.append(seconds)
            clearly_worse = len(self._probe) >= 2 and statistics.fmean(self._probe) > 1.5 * self._current_mean()
            if clearly_worse or len(self._probe) >= self.PROBE_STEPS:
                self._decide()
            return
        self._recent.append(seconds)
        if self.current < self.max_threads and self._idle_seconds is not None:
            higher = self._room_for_more(seconds)
            if higher:
                self._start_probe(higher)
                return
        if len(self._recent) < self.PROBE_STEPS:
            return
        latest = statistics.fmean(list(self._recent)[-self.PROBE_STEPS:])
        if self._reference and latest > self.SLOWDOWN * self._reference:
            # keep only the slow timings: the probe is judged against conditions as they are now
            self._recent = deque(list(self._recent)[-self.PROBE_STEPS:], maxlen=self._recent.maxlen)
            self._countdown = 0
            self._interval = self.MIN_INTERVAL
        if self._reference == 0.0:
            self._reference = latest
        self._countdown -= 1
        if self._countdown <= 0:
            others = [t for t in self.candidates if t != self.current]
            self._start_probe(others[self._next_candidate % len(others)])
            self._next_candidate += 1

    def _room_for_more(self, seconds: float) -> int:
        """The next higher thread count when the CPUs, busy before, had idle time enough over the
        last SPARE_EVERY steps for the threads it would add (a neighbour left); else 0. Only the
        change counts, so CPUs that stay idle while fewer threads stay faster cost no probes.
        Windows with pauses between steps (no request for a while) say nothing: the CPUs were
        idle because this engine was."""
        self._window_busy += seconds
        self._window_steps += 1
        if self._window is not None and self._window_steps < self.SPARE_EVERY:
            return 0
        now, idle = self._clock(), self._idle_seconds()  # type: ignore[misc]
        window, busy = self._window, self._window_busy
        self._window, self._window_busy, self._window_steps = (now, idle), 0.0, 0
        if window is None:
            return 0
        wall = now - window[0]
        if wall <= 0 or wall > 1.5 * busy:
            return 0
        higher = min(t for t in self.candidates if t > self.current)
        room = (idle - window[1]) / wall >= self.SPARE_SHARE * (higher - self.current)
        went_idle, self._cores_were_busy = room and self._cores_were_busy, not room
        return higher if went_idle else 0

    def _start_probe(self, threads: int) -> None:
        self._probe_threads, self._probe, self._probe_warming = threads, [], True

    def _current_mean(self) -> float:
        return statistics.fmean(list(self._recent)[-self.PROBE_STEPS:])

    def _decide(self) -> None:
        probe = statistics.fmean(self._probe)
        current = self._current_mean()
        if probe < self.SWITCH_GAIN * current:
            self.current = self._probe_threads
            self._recent = deque(self._probe, maxlen=self._recent.maxlen)
            self._reference = probe
            self._interval = self.MIN_INTERVAL
        else:
            self._reference = current
            self._interval = min(self._interval * 2, self.MAX_INTERVAL)
        self._countdown = self._interval
        self._probe_threads, self._probe = 0, []
        self._window = None
