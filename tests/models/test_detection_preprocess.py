"""examples/detection_preprocess.py: each image size runs only its own branch's kernels."""

from __future__ import annotations

from examples import detection_preprocess


def test_profile_shows_only_the_taken_path_ran():
    ran = detection_preprocess.main()
    small, large = set(ran["small"]), set(ran["large"])
    shared = small & large  # the size test and the comparison run for every image
    assert len(shared) == 2
    only_small, only_large = small - shared, large - shared
    assert only_small and only_large  # each path ran kernels of its own...
    assert not only_small & only_large  # ...and none of the other path's
    assert any("resize" in name for name in only_small)
    assert any("resize" in name for name in only_large)
