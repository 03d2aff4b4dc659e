"""The per-call team choice of the C target (`csrc/templates/c/team.h.j2`), driven with
made-up call times: the template's own policy functions are compiled into a small library
with a simulated clock, so what it chooses is checked exactly, without timing anything.

Each scenario gives the time of a call on one thread and on the whole team as a function
of the simulated time; the driver runs `calls` calls, each on the size the policy picks,
and returns the sizes picked and the call times."""

from __future__ import annotations

import cffi
import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen.plan import build_plan
from mdsl.codegen.templates import template_dir
from mdsl.codegen.toolchain import build_library, default_toolchain
from mdsl.targets.c.render import render_c

DRIVER = r"""
/* A call of `kernels` equal kernels on the whole team that takes `whole` seconds there and
   `one` on one thread: past `deadline` (0: none) at a kernel boundary, its remaining
   kernels run on one thread (mdsl_team_checkpoint). */
static double call_seconds(double one, double whole, int kernels, double deadline) {
    for (int k = 1; deadline > 0.0 && k < kernels; ++k) {
        const double elapsed = whole * k / kernels;
        if (elapsed >= deadline) return elapsed + one * (kernels - k) / kernels;
    }
    return whole;
}

/* Runs `calls` simulated calls from time 100 s: call i takes one[i] seconds on one thread
   and whole[i] on the whole team (the scenario's times at that call) after waking the
   team for wake[i] seconds, or `asleep` when the call before ran on one thread; the caller
   paused before it if paused[i]; crowded[i] is what the run queue hint says (2: crowded
   right after a whole-team call, by its spinning workers), picked[i] is the team size
   the policy picked for it, took[i] its seconds and chosen[i] the policy's choice after
   it. */
int simulate(int calls, int kernels, const double *one, const double *whole,
             const double *wake, double asleep, const int *paused, const int *crowded,
             int *picked, double *took, int *chosen) {
    mdsl_team_policy p;
    memset(&p, 0, sizeof p);
    double now = 100.0;
    for (int i = 0; i < calls; ++i) {
        int team = mdsl_team_pick(&p, now);
        const int spinning = i > 0 && picked[i - 1];
        if (mdsl_team_may_skip(&p, team) && (crowded[i] == 1 || (crowded[i] == 2 && spinning))) {
            mdsl_team_skip(&p, now);
            team = 0;
        }
        const double deadline = mdsl_team_deadline(&p, team);
        const double woke = !team ? 0.0 : i > 0 && !picked[i - 1] && asleep > wake[i] ? asleep : wake[i];
        const double seconds =
            team ? woke + call_seconds(one[i], whole[i], kernels, deadline) : one[i];
        now += seconds;
        mdsl_team_record(&p, team, seconds, woke, paused[i], now);
        picked[i] = team;
        took[i] = seconds;
        chosen[i] = p.choice;
    }
    return 0;
}

/* As the library's calls drive it (mdsl_team_begin / _end, on the policy's own clock):
   `calls` calls of `one` / `whole` seconds, each after `pause` seconds of the caller's. */
int paced(int calls, double one, double whole, double pause, int *picked) {
    mdsl_team_policy p;
    memset(&p, 0, sizeof p);
    double wall = 100.0;
    for (int i = 0; i < calls; ++i) {
        wall += pause;
        const int team = mdsl_team_pick(&p, mdsl_team_now(&p));
        const double seconds = team ? whole : one;
        wall += seconds;
        mdsl_team_spent(&p, team, seconds, 0.0, 0);
        picked[i] = team;
    }
    return (int)wall;
}

/* Whether a whole-team call after `calls` calls of `seconds` on `last_team` wakes its team
   first (mdsl_team_may_sleep). */
int wakes(int calls, double seconds, int last_team, int paused) {
    mdsl_team_policy p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < calls; ++i) mdsl_team_remember(&p, seconds);
    p.last_team = last_team;
    return mdsl_team_may_sleep(&p, paused);
}
"""

_FFI = cffi.FFI()
_FFI.cdef(
    "int simulate(int calls, int kernels, const double *one, const double *whole,"
    " const double *wake, double asleep, const int *paused, const int *crowded, int *picked,"
    " double *took, int *chosen);"
    "int paced(int calls, double one, double whole, double pause, int *picked);"
    "int wakes(int calls, double seconds, int last_team, int paused);"
)


@pytest.fixture(scope="module")
def policy():
    return _simulator("")


@pytest.fixture(scope="module")
def sizes_vary_policy():
    """The policy of a library of run-time sizes (module.c.j2 defines this for mdsl_run_dims)."""
    return _simulator("#define MDSL_TEAM_SIZES_VARY 1\n")


def _simulator(defines: str):
    team = (template_dir("c") / "team.h.j2").read_text()
    head = "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n"
    head += "#ifdef _OPENMP\n#include <omp.h>\n#endif\n" + defines
    source = head + team + DRIVER
    lib = _FFI.dlopen(str(build_library(source, default_toolchain(), "team_sim")))

    def paced(calls, one, whole, pause):
        picked = np.zeros(calls, dtype=np.int32)
        lib.paced(calls, one, whole, pause, _FFI.from_buffer("int[]", picked))
        return picked

    def run(one, whole, crowded=None, kernels=1, wake=None, asleep=0.0, paused=None):
        """Sizes picked (1: whole team) and each call's seconds, for per-call times of
        calls of `kernels` equal kernels, whole-team calls first waking their team for
        `wake` seconds (per call), or `asleep` after a call on one thread; `paused`: the
        calls the caller paused before."""
        one, whole = np.asarray(one, dtype=np.float64), np.asarray(whole, dtype=np.float64)
        wake = np.zeros(len(one)) if wake is None else np.asarray(wake, dtype=np.float64)
        paused = np.zeros(len(one), np.int32) if paused is None else np.int32(paused)
        crowded = np.zeros(len(one), np.int32) if crowded is None else np.int32(crowded)
        picked, chosen = np.zeros(len(one), dtype=np.int32), np.zeros(len(one), dtype=np.int32)
        took = np.zeros(len(one))
        lib.simulate(
            len(one),
            kernels,
            _FFI.from_buffer("double[]", one),
            _FFI.from_buffer("double[]", whole),
            _FFI.from_buffer("double[]", wake),
            asleep,
            _FFI.from_buffer("int[]", paused),
            _FFI.from_buffer("int[]", crowded),
            _FFI.from_buffer("int[]", picked),
            _FFI.from_buffer("double[]", took),
            _FFI.from_buffer("int[]", chosen),
        )
        run.chosen = chosen
        return picked, took

    run.paced = paced
    run.wakes = lambda *args: bool(lib.wakes(*args))
    return run


def steady(calls, one, whole):
    return np.full(calls, one), np.full(calls, whole)


def test_the_first_four_calls_try_both_sizes_cold_and_warm(policy):
    picked, _ = policy(*steady(4, 2e-3, 1e-3))
    assert picked.tolist() == [1, 0, 0, 1]  # the first result on the whole team


def test_one_slow_warm_call_among_the_first_does_not_choose_one_thread(policy):
    """A neighbour's burst during the warm whole-team call (call 3) made it as slow as one
    thread: each size's faster call decides, so the team's cold call still counts."""
    one, whole = steady(40, 150e-3, 75e-3)
    whole[0], whole[3] = 100e-3, 140e-3  # cold; then warm but hit by a burst
    picked, _ = policy(one, whole)
    assert picked[:4].tolist() == [1, 0, 0, 1]
    assert picked[4:12].all()  # without it: one thread until a probe at call 12 wins


def test_on_a_crowded_machine_the_first_call_runs_on_one_thread_and_the_second_on_the_team(
    policy,
):
    picked, _ = policy(*steady(40, 2e-3, 1e-3), crowded=[1] * 40)
    assert picked[:4].tolist() == [0, 1, 0, 1]  # each size cold, with no time to beat yet
    assert picked[4:12].all()  # no probe counted as lost: the whole team chosen at once


def test_on_a_quiet_machine_the_whole_team_runs_nearly_every_call(policy):
    picked, times = policy(*steady(3000, 2e-3, 1e-3))
    assert picked[4:12].all()  # chosen from the first calls
    ones = np.flatnonzero(picked[4:] == 0)
    assert 3 <= len(ones) <= 20  # probes of one thread, ever rarer
    assert np.diff(ones)[-1] >= 256 or times[4 + ones[-2] : 4 + ones[-1]].sum() >= 1.0


def test_a_team_as_fast_as_when_chosen_probes_one_thread_once_then_by_its_period(policy):
    """Calls of 3 ms on the team, 6 ms on one thread: after the check of the first calls'
    choice, the next probe of one thread waits for a second of calls (at counted gaps of
    8, 16, 32 and 64 calls, 12% of the first calls' time went to probes)."""
    picked, times = policy(*steady(600, 6e-3, 3e-3))
    probes = 4 + np.flatnonzero(picked[4:] == 0)
    assert probes[0] == 12 and 300 < probes[1] < 400
    assert times[4:300].sum() <= 1.02 * 3e-3 * 296


def test_the_whole_team_must_win_by_the_margin(policy):
    picked, _ = policy(*steady(2000, 1e-3, 0.95e-3))  # 5% faster: within the margin
    assert not picked[4:].any() or picked[4:].mean() < 0.01


def test_under_steady_load_whole_team_probes_cost_at_most_their_share(policy):
    # another process holds a core: a whole-team call waits at every barrier
    picked, times = policy(*steady(20000, 4e-3, 60e-3))
    assert picked[2:4].tolist() == [0, 1] and not picked[4:].all()
    whole = times[4:][picked[4:] == 1]
    extra = whole.sum() - 4e-3 * len(whole)
    assert len(whole) >= 1 and extra <= 0.025 * times[4:].sum()


def test_one_lucky_whole_team_call_under_load_does_not_change_the_choice(policy):
    one, whole = steady(4000, 4e-3, 60e-3)
    whole[1::2] = 1e-3  # every other call would be lucky on the whole team
    picked, _ = policy(one, whole)
    assert picked[50:].sum() >= 5 and not policy.chosen[50:].any()  # probed, never chosen


def passing_load(calls=600, start=100, end=150):
    """Another runtime's pool spins on the second core from call `start` to `end`: mdsl's
    calls meanwhile are 50x slower on the whole team, the run queue shows it crowded."""
    one, whole = steady(calls, 2e-3, 1e-3)
    whole[start:end] = 50e-3
    crowded = np.zeros(calls, np.int32)
    crowded[start:end] = 1
    return one, whole, crowded


def test_a_spike_of_a_few_times_a_call_does_not_move_the_choice(policy):
    one, whole = steady(3000, 2e-3, 1e-3)
    whole[100::50] = 3e-3  # slower than one thread, once in a while
    picked, _ = policy(one, whole)
    assert picked[100:].mean() > 0.99


def test_a_passing_load_costs_one_slow_call_and_is_left_soon_after(policy):
    one, whole, crowded = passing_load()
    picked, _ = policy(one, whole, crowded)
    assert picked[90:101].all() and picked[101:150].sum() == 0  # one slow call, then 1T
    back = 150 + int(np.flatnonzero(picked[150:])[0])
    assert back <= 150 + 8 * (1 + 2 + 4) and picked[back + 3 :].mean() > 0.95


def test_without_the_run_queue_hint_a_costly_probe_waits_for_its_share(policy):
    one, whole, _ = passing_load(calls=3000)
    picked, times = policy(one, whole)
    assert picked[90:101].all() and not picked[101:104].any()
    probes = 104 + np.flatnonzero(picked[104:])  # whole-team calls after the switch
    assert whole[probes[0]] == 50e-3  # the first probe still met the load (cost 49 ms)
    waited = times[probes[0] + 1 : probes[1]].sum()
    assert waited >= (49e-3 - 8 * 2e-3) / 0.02 * 0.9  # its cost past the credit, at 2%
    assert picked[probes[1] + 3 :].mean() > 0.95  # then the team is back


def test_a_run_queue_hint_that_proved_right_is_trusted_for_longer(policy):
    calls = 20000
    one, whole = steady(calls, 4e-3, 60e-3)  # a core kept busy, and the queue shows it
    picked, times = policy(one, whole, crowded=np.ones(calls, np.int32))
    probes = 4 + np.flatnonzero(picked[4:])
    gaps = np.diff(probes)
    assert len(probes) >= 3 and gaps[-1] >= 3 * gaps[0]
    assert (whole[probes] - one[probes]).sum() <= 0.01 * times.sum()


def test_the_run_queue_hint_never_keeps_a_faster_team_off_for_good(policy):
    # a container that sees a busy host's run queue, on processors of its own
    calls = 2000
    one, whole = steady(calls, 2e-3, 1e-3)
    whole[:4] = 5e-3  # the first calls chose one thread
    picked, _ = policy(one, whole, crowded=np.ones(calls, np.int32))
    assert picked[4] == 0 and picked[-1000:].mean() > 0.95


def test_a_load_that_comes_is_noticed_and_the_choice_follows(policy):
    one, whole = steady(4000, 2e-3, 1e-3)
    whole[500:] = 30e-3  # a busy neighbour from call 500 on
    picked, _ = policy(one, whole)
    assert picked[400:500].mean() > 0.9
    assert (picked[500:520] == 1).sum() <= 3  # a call or two, then one thread
    assert picked[1000:].mean() < 0.01


def test_under_a_load_that_makes_one_thread_noisy_the_faster_one_thread_still_wins(policy):
    """A busy machine: whole-team calls 10x slower from call 500, one-thread calls
    mostly unharmed but every seventh one 20x slower. One thread is faster in the mean
    (5.5 ms against 7 ms) and in the median; neither its slow calls (probes they end,
    or its last call as the reference) may keep or bring back the whole team."""
    one, whole = steady(6000, 1.4e-3, 0.7e-3)
    whole[500:] = 7e-3
    one[500::7] = 30e-3
    picked, _ = policy(one, whole)
    assert picked[400:500].all() and picked[500:520].sum() <= 3
    assert picked[600:].mean() < 0.03 and not policy.chosen[600:].any()


def test_a_slow_call_on_one_thread_does_not_hold_back_leaving_a_slowed_team(policy):
    """Whole-team calls 10x slower from call 500. The first probe of one thread meets a
    200 ms hiccup: probes of one thread pay no credit, so the next one comes after the
    minimum gap (the load changed: the count of lost probes starts again)."""
    one, whole = steady(2000, 1.4e-3, 0.7e-3)
    whole[500:] = 7e-3
    one[501] = 0.2
    picked, _ = policy(one, whole)
    assert picked[500] == 1 and picked[501] == 0  # the probe, at once
    assert picked[502:510].all() and not picked[510:513].any()
    assert not policy.chosen[512:].any()


def test_a_probe_of_one_thread_ended_by_a_spike_is_tried_again_at_once(policy):
    one, whole = steady(2000, 1.4e-3, 0.7e-3)
    whole[500:] = 7e-3
    one[502] = 30e-3  # the probe's second call
    picked, _ = policy(one, whole)
    assert picked[500:507].tolist() == [1, 0, 0, 1, 0, 0, 0]
    assert not policy.chosen[506:].any()


def test_a_lost_probe_is_retried_after_the_minimum_gap_then_ever_later(policy):
    picked, _ = policy(*steady(1000, 1e-3, 1.5e-3))  # one thread wins; cheap probes
    probes = 4 + np.flatnonzero(picked[4:] == 1)
    assert np.diff(probes)[:4].tolist() == [8 + 1, 16 + 1, 32 + 1, 64 + 1]


def test_a_probe_that_has_lost_ends_its_team_at_the_next_kernel_boundary(policy):
    """A core kept busy: a whole-team call of ten kernels takes 60 ms against 4 ms on one
    thread. Past the time it had to beat, a probe's remaining kernels run on one thread:
    it costs at most that time, the kernel in flight and the rest on one thread."""
    one, whole = steady(20000, 4e-3, 60e-3)
    picked, times = policy(one, whole, kernels=10)
    assert picked[3] == 1 and times[3] <= 4e-3 + 6e-3 + 4e-3  # the first warm call too
    probes = 4 + np.flatnonzero(picked[4:])
    assert len(probes) >= 10 and not policy.chosen[4:].any()
    assert times[probes].max() <= 4e-3 + 6e-3 + 4e-3
    assert (times[probes] - 4e-3).sum() <= 0.008 * times[4:].sum()  # at least once a second


def test_a_load_that_comes_ends_the_chosen_team_within_the_call(policy):
    """The whole team is chosen (1 ms against 2 ms on one thread) when a busy neighbour
    makes its calls 30 ms from call 500: the first such call runs on one thread once it
    has taken twice one thread's time, and the next call probes one thread."""
    one, whole = steady(2000, 2e-3, 1e-3)
    whole[500:] = 30e-3
    picked, times = policy(one, whole, kernels=10)
    assert picked[400:501].all() and times[500] <= 2 * 2e-3 + 3e-3 + 2e-3
    assert picked[501] == 0 and picked[600:].mean() < 0.05


def test_a_flapping_load_costs_the_chosen_team_at_most_the_probe_share(policy):
    """The whole team is faster on a quiet machine (1 ms against 2 ms), but a neighbour's
    short bursts (5 calls of every 40) make its calls 50 ms. A probe between two bursts
    wins, and the burst after it costs the chosen team 48 ms more than one thread: paid
    from the probes' credit, the team is not probed again until the share has paid for
    it. Never slower than one thread by more than the share (without the credit, 1.2x)."""
    one, whole = steady(20000, 2e-3, 1e-3)
    calls = np.arange(20000)
    whole[(calls >= 100) & (calls % 40 >= 35)] = 50e-3
    picked, times = policy(one, whole)
    assert picked[40:100].mean() > 0.9  # quiet at first: the whole team
    assert times[100:].sum() <= 1.03 * one[100:].sum()


@pytest.mark.parametrize("whole", [0.1, 0.5])
def test_slow_calls_on_a_quiet_machine_probe_one_thread_within_the_share(policy, whole):
    """Calls of 0.1 or 0.5 s on the whole team (twice that on one thread): a probe of one
    thread costs a whole call, so probing it every second cost 8% or 33% of the time; now
    the probe share's 2%."""
    picked, times = policy(*steady(2000, 2 * whole, whole))
    assert picked[4:].mean() > 0.97 and times[4:].mean() <= 1.025 * whole


def test_a_library_of_run_time_sizes_keeps_the_team_for_its_larger_calls(policy, sizes_vary_policy):
    """One call in ten is 8x larger (a symbolic batch): its time says nothing of the load.
    A library of static sizes reads it as one (its team ends mid-call and pays from the
    credit: on the team for a few percent of the calls); one of run-time sizes does
    neither and keeps the team as often as the policy before those mechanisms (45%)."""
    one, whole = steady(5000, 2e-3, 1e-3)
    one[::10] *= 8
    whole[::10] *= 8
    static, _ = policy(one, whole, kernels=10)
    picked, times = sizes_vary_policy(one, whole, kernels=10)
    assert static[4:].mean() < 0.1 and picked[4:].mean() > 0.4
    assert (times[::10][picked[::10] == 1] == whole[::10][picked[::10] == 1]).all()


@pytest.mark.parametrize("rows", [5, "N"])
def test_only_a_library_of_run_time_sizes_is_built_as_one(rows):
    with mdsl.Graph("sizes") as g:
        g.output(ops.relu(g.input("x", (rows, 8))) * 2.0, "y")
    source = render_c(build_plan(mdsl.optimize(g), c_bindings=True, symbolic=rows == "N"))
    assert ("#define MDSL_TEAM_SIZES_VARY 1" in source) == (rows == "N")


def test_a_team_left_during_a_burst_is_tried_again_a_few_calls_later(policy):
    """A neighbour's burst of 6 calls makes the chosen team as slow as one thread (a
    shared machine's other jobs did so to the ResNet b8 block: 34-36 ms on either size
    where the team alone takes 19): the choice moves to one thread, and once the burst
    has passed the team is probed after MDSL_TEAM_PROBE_SOON calls, not the minimum gap
    of a lost probe (8 calls on one thread at twice the team's time, each burst)."""
    one, whole = steady(1000, 2e-3, 1e-3)
    whole[500:506] = 2.2e-3
    picked, _ = policy(one, whole)
    assert picked[400:500].all()
    left = 500 + int(np.flatnonzero(picked[500:] == 0)[0])
    back = left + int(np.flatnonzero(picked[left:] == 1)[0])
    assert back >= 506 and not policy.chosen[back - 1]  # one thread chosen in the burst
    assert back - left <= 3 + 2 + 1  # the probe's calls, then soon after
    assert picked[back : back + 3].all() and picked[back + 3 : 600].mean() > 0.95


def test_a_caller_pausing_between_calls_pays_the_probe_share_of_its_calls_only(policy):
    """A ResNet block's calls (19 ms on the team, 35 ms on one thread) 60 ms apart: one
    thread is probed as often as for calls back to back (on the wall clock: once a second,
    4.5% of the calls' time)."""
    paused = policy.paced(2000, 35e-3, 19e-3, 60e-3)
    assert paused.tolist() == policy.paced(2000, 35e-3, 19e-3, 0.0).tolist()
    probes = np.flatnonzero(paused[4:] == 0)
    assert len(probes) * (35e-3 - 19e-3) <= 0.02 * 2000 * 19e-3 + 3 * 16e-3


def test_a_team_that_sleeps_between_blocks_of_calls_stays_chosen(policy):
    """Blocks of 8 calls with a pause before each (make bench's rounds): the team's worker
    sleeps in the pause, and on a 2-vCPU virtual machine takes 4 ms to wake, where a call
    takes 1 ms on the team and 2 ms on one thread; after a call on one thread it has slept
    too. The wake-ups must not choose one thread: once they did, every probe of the team
    paid one and lost, and the calls stayed on one thread, slower than at 1 thread."""
    one, whole = steady(3000, 2e-3, 1e-3)
    wake = np.zeros(3000)
    wake[::8] = 4e-3
    picked, times = policy(one, whole, wake=wake, asleep=4e-3)
    assert picked[4:].mean() > 0.95
    assert times[8:].sum() <= 0.8 * one[8:].sum()


def test_a_caller_whose_every_team_call_pays_a_wake_up_gets_one_thread(policy):
    """Calls spaced out: every whole-team call first waits 4 ms for its team to wake, so
    one thread (2 ms) is faster than the team (1 + 4 ms), and the wake-up belongs to the
    choice's times, and so to the probes' after their first call: the calls stay on one
    thread but for probes within their share (judging every probe call without its
    wake-up cost twice that: 3.4%)."""
    one, whole = steady(3000, 2e-3, 1e-3)
    picked, times = policy(one, whole, wake=np.full(3000, 4e-3))
    assert picked[50:].mean() < 0.05
    assert times[50:].sum() <= 1.025 * one[50:].sum()


def test_calls_after_the_callers_pauses_neither_choose_nor_judge(policy):
    """make bench's pattern: blocks of 3 calls, the caller pausing before each; the first
    call of a block finds its caches cold, 1.5x slower on either size, where the warm
    team (2.6 ms) beats one thread (3.4 ms) by more than the margin. A probe of the team
    that met a cold call lost, and the next one came 8 calls later."""
    one, whole = steady(3000, 3.4e-3, 2.6e-3)
    paused = np.zeros(3000, np.int32)
    paused[::3] = 1
    one[::3] *= 1.5
    whole[::3] *= 1.5
    whole[:4] = 5e-3  # the first calls chose one thread
    picked, _ = policy(one, whole, paused=paused)
    assert picked[100:].mean() > 0.95


def test_pauses_that_are_the_callers_norm_count(policy):
    """Every call after a pause, and the team (1 ms) faster than one thread (2 ms) after
    the first calls chose one thread: cold calls are all there is, and they choose."""
    one, whole = steady(3000, 2e-3, 1e-3)
    whole[:4] = 5e-3
    picked, _ = policy(one, whole, paused=np.ones(3000, np.int32))
    assert picked[100:].mean() > 0.95 and policy.chosen[100:].all()
    # a pause before every other call: with the call after each, every call is cold
    picked, _ = policy(one, whole, paused=np.arange(3000) % 2 == 0)
    assert picked[100:].mean() > 0.95 and policy.chosen[100:].all()


def test_the_run_queue_hint_is_not_asked_after_a_whole_team_call(policy):
    """Right after a whole-team call its workers still spin and the run queue counts them:
    a probe of the team must not be skipped for that (a cold first call of a probe had
    left it to the next call, which the hint skipped every time)."""
    one, whole = steady(3000, 3.4e-3, 2.6e-3)
    paused = np.zeros(3000, np.int32)
    paused[::3] = 1
    whole[:4] = 5e-3
    picked, _ = policy(one, whole, paused=paused, crowded=np.full(3000, 2, np.int32))
    assert picked[12:40].mean() > 0.8  # from the first probe on (skipped: 25 calls more)


def test_one_thread_chosen_by_the_first_calls_is_checked_soon(policy):
    """The first calls are the least sure (cold caches, a team waking, primitives being
    made): a team they made look slow is probed again after MDSL_TEAM_PROBE_SOON calls,
    not after the minimum gap of a lost probe (a third of make bench's 27 calls)."""
    one, whole = steady(100, 3.4e-3, 2.6e-3)
    whole[:4] = 15e-3
    picked, _ = policy(one, whole)
    assert picked[:4].tolist() == [1, 0, 0, 1] and not policy.chosen[3]
    assert picked[4:9].tolist() == [0, 0, 1, 1, 1] and policy.chosen[8:].mean() > 0.95


def test_a_team_is_woken_where_it_may_have_slept_and_calls_can_afford_it(policy):
    assert policy.wakes(0, 0.0, 0, 0)  # the first call: the workers are made
    assert policy.wakes(5, 1e-3, 0, 0) and policy.wakes(5, 1e-3, 1, 1)  # one thread; paused
    assert not policy.wakes(5, 1e-3, 1, 0)  # right after a whole-team call: still spinning
    # a 0.24 us graph: its probes' regions left the worker spinning, 1.2x slower calls
    assert not policy.wakes(5, 0.24e-6, 0, 1)


def test_a_host_that_takes_the_processor_back_once_more_after_a_pause_keeps_the_team(policy):
    """make bench's blocks of 80 us calls (40 us on the team) on a 2-vCPU virtual machine:
    after each pause of the caller's the host gives the idle processor back late (the
    first whole-team call 7 ms) and takes it once more right after (the second 4 ms);
    the calls are too short to wake the team first. That second call triggered a probe
    of one thread against it, which won, and its cost kept the team's probes off for
    thousands of calls: W1-64K ran at 2 threads as slowly as at 1."""
    one, whole = steady(3000, 80e-6, 40e-6)
    paused = np.zeros(3000, np.int32)
    paused[150::150] = 1
    whole[150::150], whole[151::150] = 7e-3, 4e-3
    picked, _ = policy(one, whole, paused=paused)
    assert picked[4:].mean() > 0.95
