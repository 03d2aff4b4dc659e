"""Memory planning: placements never overlap live buffers, and stay near the bound."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from mdsl.codegen import memory
from mdsl.codegen.memory import Buffer, aligned, plan_memory


def _overlap(a: Buffer, b: Buffer) -> bool:
    return a.start <= b.end and b.start <= a.end


def _assert_valid(buffers, plan):
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            if not _overlap(a, b) or _same_storage(a, b, plan.aliases):
                continue
            oa, ob = plan.offsets[a.name], plan.offsets[b.name]
            assert oa + a.size <= ob or ob + b.size <= oa, (a, b, oa, ob)
        assert plan.offsets[a.name] % plan.alignment == 0
        assert plan.offsets[a.name] + a.size <= plan.arena_bytes


def _same_storage(a: Buffer, b: Buffer, aliases: dict) -> bool:
    """Whether `a` and `b` are one in-place chain (an output reusing an input's storage,
    perhaps itself reused)."""
    return memory._root(a.name, aliases) == memory._root(b.name, aliases)


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


# -- templates: one placement reused at other sizes ---------------------------------------
def _at(lives, scale):
    """Buffers (per, fixed, start, end) at `scale`: per * scale + fixed bytes."""
    return [Buffer(f"b{i}", p * scale + f, s, e) for i, (p, f, s, e) in enumerate(lives)]


def _inplace_of(lives):
    """Every buffer may take over the storage of one dying where it is defined."""
    return {
        f"b{i}": f"b{j}"
        for i, (_, _, s, _) in enumerate(lives)
        for j, (_, _, _, e) in enumerate(lives)
        if j < i and e == s
    }


scaled_lives = st.lists(
    st.tuples(st.integers(0, 3000), st.integers(0, 200), st.integers(0, 30), st.integers(0, 10)),
    min_size=1,
    max_size=40,
).map(lambda xs: [(p, f, s, s + d) for p, f, s, d in xs])


@settings(max_examples=200, derandomize=True, deadline=None)
@given(scaled_lives, st.sampled_from([0, 1, 2, 3, 7, 64, 65, 1000]))
def test_a_template_applied_is_a_valid_plan_or_none(lives, scale):
    inplace = _inplace_of(lives)
    template = memory.layout_template(_at(lives, 16), inplace=inplace)
    if template is None:
        return
    bufs = _at(lives, scale)
    fresh = plan_memory(bufs, inplace=inplace)
    applied = template.apply([b.size for b in bufs])
    if applied is None:
        return
    _assert_valid(bufs, applied)
    assert applied.aliases == fresh.aliases  # the pairs legal at these sizes
    assert applied.lower_bound_bytes == fresh.lower_bound_bytes
    assert applied.naive_bytes == fresh.naive_bytes
    # no further above the lower bound than the template's own placement
    ratio = template.arena_bytes / template.lower_bound_bytes
    assert applied.arena_bytes <= applied.lower_bound_bytes * ratio + 1e-6


@settings(max_examples=100, derandomize=True, deadline=None)
@given(scaled_lives)
def test_a_template_at_its_own_sizes_is_the_plan(lives):
    bufs, inplace = _at(lives, 16), _inplace_of(lives)
    template = memory.layout_template(bufs, inplace=inplace)
    plan = plan_memory(bufs, inplace=inplace)
    if template is None:
        assert plan.lower_bound_bytes == 0
        return
    applied = template.apply([b.size for b in bufs])
    assert applied is not None
    assert (applied.offsets, applied.arena_bytes) == (plan.offsets, plan.arena_bytes)


def test_a_template_scales_with_sizes_that_grow_alike():
    lives = [(64 * (i % 5 + 1), 0, i, i + 1 + i % 3) for i in range(30)]
    template = memory.layout_template(_at(lives, 64), inplace=_inplace_of(lives))
    for scale in (1, 8, 1000):
        bufs = _at(lives, scale)
        applied = template.apply([b.size for b in bufs])
        assert applied is not None
        _assert_valid(bufs, applied)
        assert applied.arena_bytes * 64 == template.arena_bytes * scale


def test_a_template_that_would_overlap_is_refused():
    """b1 fits in the hole b3 leaves below b0 (both live at step 3); grown, it does not."""
    lives = [(128, 64, 0, 3), (128, 64, 3, 5), (128, 64, 1, 4), (0, 256, 2, 2)]
    template = memory.layout_template(_at(lives, 1))
    assert template.apply([b.size for b in _at(lives, 1)]).offsets["b1"] == 0
    unbounded = dataclasses.replace(template, arena_bytes=1 << 40)  # only overlaps refused
    assert unbounded.apply([b.size for b in _at(lives, 4)]) is None
    assert template.apply([b.size for b in _at(lives, 4)]) is None


def test_a_template_refuses_sizes_where_other_in_place_pairs_are_legal():
    bufs = [Buffer("x", 4096, 0, 1), Buffer("y", 4096, 1, 2)]
    template = memory.layout_template(bufs, inplace={"y": "x"})
    assert template.apply([4096, 4096]).aliases == {"y": "x"}
    assert template.apply([1024, 4096]) is None  # y no longer fits in x: not in place
