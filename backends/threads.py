"""How many CPU threads each decode step uses.

A desktop is never idle. llama.cpp's OpenMP workers spin at a barrier, so when another process
takes a core, a step with as many threads as cores waits for a descheduled worker and decode
collapses; one thread fewer holds up, but leaves speed unused when the machine is idle. No fixed
setting wins both, so the adaptive policy measures: it decodes with the current thread count,
now and then runs a few steps with another count, and keeps whichever was faster. A sudden
slowdown of the current setting (a neighbour started) triggers a probe at once; probes that
lose come less and less often, so their cost fades when nothing changes.

Only decode steps (no prompt in the batch) are measured, and only against steps with the same
number of rows, so a change in load is not mistaken for a change in speed. Settings are compared
by their mean step time, not the median: a contended setting is fast on most steps and very slow
on some, and the slow ones are what throughput pays for.
"""

from __future__ import annotations

import os
import statistics
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


class ThreadPolicy:
    """A fixed thread count, or adaptive between 1 and `max_threads` (see the module's text)."""

    PROBE_STEPS = 8
    MIN_INTERVAL = 16
    MAX_INTERVAL = 512
    SWITCH_GAIN = 0.95  # a probe must be at least 5% faster to win
    SLOWDOWN = 1.3  # the current setting this much slower than measured: probe now

    def __init__(self, max_threads: int, *, adaptive: bool, apply: Callable[[int], None]):
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
        self._interval = self.MIN_INTERVAL
        self._countdown = self.MIN_INTERVAL
        self._next_candidate = 0
        self._set(max_threads)

    def describe(self) -> str:
        if self.adaptive:
            return f"adaptive, {' / '.join(map(str, self.candidates))} threads by measured decode speed"
        return f"{self.max_threads} (fixed)"

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
            return
        if self._probe_threads:
            self._probe.append(seconds)
            clearly_worse = len(self._probe) >= 2 and statistics.fmean(self._probe) > 1.5 * self._current_mean()
            if clearly_worse or len(self._probe) >= self.PROBE_STEPS:
                self._decide()
            return
        self._recent.append(seconds)
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
            self._probe_threads = others[self._next_candidate % len(others)]
            self._next_candidate += 1
            self._probe = []

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
