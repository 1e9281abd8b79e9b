"""The adaptive thread policy, driven with step timings like those measured on 2-core machines."""

from __future__ import annotations

from backends.threads import ThreadPolicy, physical_cores

# seconds per single-stream decode step (tokens/s from llama-bench on the default model)
IDLE = {2: 1 / 175, 1: 1 / 159}
NEIGHBOUR = {2: 1 / 60, 1: 1 / 150}


def run(policy: ThreadPolicy, applied: list[int], timings: dict[int, float], steps: int) -> list[int]:
    """Drive `steps` decode steps; return the thread count each one ran with."""
    used = []
    for _ in range(steps):
        policy.before_step(prefill=False)
        threads = applied[-1]
        used.append(threads)
        policy.after_step(timings[threads], rows=1, prefill=False)
    return used


def make() -> tuple[ThreadPolicy, list[int]]:
    applied: list[int] = []
    return ThreadPolicy(2, adaptive=True, apply=applied.append), applied


def test_idle_keeps_all_threads_and_probes_less_and_less():
    policy, applied = make()
    used = run(policy, applied, IDLE, 2000)
    assert policy.current == 2
    assert used[-1000:].count(1) < used[:1000].count(1)  # probes that keep losing come less often
    rate = len(used) / sum(IDLE[t] for t in used)
    assert rate >= 0.99 * 175  # probing costs almost nothing


def test_a_neighbour_moves_to_one_thread_quickly_and_back_when_it_leaves():
    policy, applied = make()
    run(policy, applied, IDLE, 300)
    used = run(policy, applied, NEIGHBOUR, 300)
    assert policy.current == 1
    settled = used[20:]
    assert len(settled) / sum(NEIGHBOUR[t] for t in settled) >= 0.9 / NEIGHBOUR[1]  # probes of 2 cut short
    run(policy, applied, IDLE, 1200)
    assert policy.current == 2


class Machine:
    """Two cores as the policy sees them through its clock and the CPUs' idle seconds: the cores
    neither this engine's threads nor a neighbour use are idle."""

    def __init__(self) -> None:
        self.now = self.idle = 0.0
        self.neighbours = 0

    def run(self, policy: ThreadPolicy, applied: list[int], timings: dict[int, float], steps: int) -> list[int]:
        used = []
        for _ in range(steps):
            policy.before_step(prefill=False)
            threads = applied[-1]
            used.append(threads)
            seconds = timings[threads]
            self.now += seconds * 1.05  # sampling and the event loop between steps
            self.idle += max(0, 2 - threads - self.neighbours) * seconds
            policy.after_step(seconds, rows=1, prefill=False)
        return used


def make_watching(machine: Machine) -> tuple[ThreadPolicy, list[int]]:
    applied: list[int] = []
    policy = ThreadPolicy(2, adaptive=True, apply=applied.append, idle_seconds=lambda: machine.idle,
                          clock=lambda: machine.now)
    return policy, applied


def test_a_core_that_goes_idle_brings_the_threads_back_at_once():
    machine = Machine()
    policy, applied = make_watching(machine)
    machine.run(policy, applied, IDLE, 300)
    machine.neighbours = 1
    machine.run(policy, applied, NEIGHBOUR, 3000)  # long enough for probes to have become rare
    assert policy.current == 1
    machine.neighbours = 0
    used = machine.run(policy, applied, IDLE, 300)
    assert used.index(2) <= 2 * ThreadPolicy.SPARE_EVERY  # the scheduled probe is up to 512 steps away
    assert policy.current == 2 and used[-200:].count(2) >= 200 - 3 * ThreadPolicy.PROBE_STEPS

    blind, blind_applied = make()  # the same without the CPUs' idle time: it waits for its schedule
    run(blind, blind_applied, IDLE, 300)
    run(blind, blind_applied, NEIGHBOUR, 3000)
    assert run(blind, blind_applied, IDLE, 300).index(2) > 2 * ThreadPolicy.SPARE_EVERY


def test_cores_that_stay_idle_cost_no_extra_probes():
    """Fewer threads can be faster with a core idle (a hypervisor's other guests): a core that
    stays idle does not trigger probe after probe, only one that goes idle does."""
    machine = Machine()
    one_is_faster = {2: 1 / 120, 1: 1 / 150}
    watching, applied = make_watching(machine)
    used = machine.run(watching, applied, one_is_faster, 3000)
    blind, blind_applied = make()
    blind_used = run(blind, blind_applied, one_is_faster, 3000)
    assert watching.current == blind.current == 1
    assert used == blind_used


def test_decode_speed_targets_hold_with_these_timings():
    policy, applied = make()
    run(policy, applied, IDLE, 100)
    idle = run(policy, applied, IDLE, 1000)
    idle_rate = len(idle) / sum(IDLE[t] for t in idle)
    loaded = run(policy, applied, NEIGHBOUR, 1000)
    loaded_rate = len(loaded) / sum(NEIGHBOUR[t] for t in loaded)
    assert idle_rate >= 0.95 * 175
    assert loaded_rate >= 0.8 * idle_rate


def test_prefill_steps_and_changing_loads_are_not_measured():
    policy, applied = make()
    for _ in range(100):
        policy.before_step(prefill=True)
        policy.after_step(1.0, rows=300, prefill=True)  # slow prefill steps say nothing of decode speed
    assert policy.current == 2
    for rows in range(1, 60):
        policy.before_step(prefill=False)
        policy.after_step(IDLE[applied[-1]] * rows, rows=rows, prefill=False)
    assert policy.current == 2


def test_fixed_policy_never_changes():
    applied: list[int] = []
    policy = ThreadPolicy(4, adaptive=False, apply=applied.append)
    run(policy, applied, {4: 1.0, 2: 0.1, 1: 0.01}, 200)
    assert applied == [4] and policy.describe() == "4 (fixed)"


def test_physical_cores_is_sane():
    assert 1 <= physical_cores() <= 4096
