"""Memory planning: placements never overlap live buffers, and stay near the bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mdsl.codegen import memory
from mdsl.codegen.memory import Buffer, aligned, plan_memory


def _overlap(a: Buffer, b: Buffer) -> bool:
    return a.start <= b.end and b.start <= a.end


def _assert_valid(buffers, plan):
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            if not _overlap(a, b) or plan.aliases.get(b.name) == a.name:
                continue
            if plan.aliases.get(a.name) == b.name:
                continue
            oa, ob = plan.offsets[a.name], plan.offsets[b.name]
            assert oa + a.size <= ob or ob + b.size <= oa, (a, b, oa, ob)
        assert plan.offsets[a.name] % plan.alignment == 0
        assert plan.offsets[a.name] + a.size <= plan.arena_bytes


def test_chain_reuses_dead_buffers():
    bufs = [Buffer(f"t{i}", 1000, i, i + 1) for i in range(10)]
    plan = plan_memory(bufs)
    _assert_valid(bufs, plan)
    assert plan.naive_bytes == 10 * aligned(1000)
    assert plan.arena_bytes == plan.lower_bound_bytes == 2 * aligned(1000)


def test_inplace_alias_shares_offset_and_halves_the_chain():
    bufs = [Buffer("x", 4096, 0, 1), Buffer("y", 4096, 1, 2), Buffer("z", 4096, 2, 3)]
    plan = plan_memory(bufs, inplace={"y": "x", "z": "y"})
    assert plan.offsets["x"] == plan.offsets["y"] == plan.offsets["z"]
    assert plan.arena_bytes == 4096


def test_illegal_inplace_is_ignored():
    # x is still read at step 3, after y is written at step 1: no aliasing
    bufs = [Buffer("x", 4096, 0, 3), Buffer("y", 4096, 1, 2)]
    plan = plan_memory(bufs, inplace={"y": "x"})
    assert plan.aliases == {}
    assert plan.offsets["x"] != plan.offsets["y"]


buffer_lists = st.lists(
    st.tuples(st.integers(1, 5000), st.integers(0, 30), st.integers(0, 10)),
    min_size=1,
    max_size=40,
).map(lambda xs: [Buffer(f"b{i}", s, t, t + d) for i, (s, t, d) in enumerate(xs)])


@settings(max_examples=200, derandomize=True, deadline=None)
@given(buffer_lists)
def test_random_plans_are_valid_and_bounded(bufs):
    plan = plan_memory(bufs)
    _assert_valid(bufs, plan)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes


def test_a_later_order_is_tried_when_the_first_misses_the_bound():
    """Sizes first leaves a hole here (896 bytes); definition order reaches the bound."""
    lives = [(256, 1, 3), (256, 1, 4), (128, 0, 3), (320, 4, 7), (64, 5, 7), (192, 1, 4)]
    bufs = [Buffer(f"b{i}", size, start, end) for i, (size, start, end) in enumerate(lives)]
    assert memory._place(sorted(bufs, key=memory._by_size))[1] == 896
    plan = plan_memory(bufs)
    _assert_valid(bufs, plan)
    assert plan.arena_bytes == plan.lower_bound_bytes == 832


@settings(max_examples=200, derandomize=True, deadline=None)
@given(buffer_lists)
def test_the_arena_is_the_smallest_of_the_three_orders(bufs):
    """Placement stops early only at the lower bound, which no order beats."""
    aligned_bufs = [Buffer(b.name, aligned(b.size), b.start, b.end) for b in bufs]
    orders = (memory._by_size, memory._by_size_then_end, memory._by_start)
    smallest = min(memory._place(sorted(aligned_bufs, key=order))[1] for order in orders)
    assert plan_memory(bufs).arena_bytes == smallest
