"""Group selection: complete groups only, staleness bound, never trained twice."""

from trainer.batches import GroupSummary, select_groups

DONE = ("succeeded", "succeeded", "failed")


def group(gid: str, statuses=DONE, version: int | None = 10, trained: bool = False):
    return GroupSummary(gid, tuple(statuses), version, trained)


def test_incomplete_groups_held_back() -> None:
    groups = [group("a", ("succeeded", "running")), group("b", ("queued",) * 2), group("c")]
    selection = select_groups(groups, current_version=10, max_staleness=0, limit=5)
    assert [g.group_id for g in selection.selected] == ["c"]
    assert selection.incomplete == 2


def test_staleness_bound_and_histogram() -> None:
    groups = [group("v10", version=10), group("v9", version=9), group("v7", version=7)]
    selection = select_groups(groups, current_version=10, max_staleness=1, limit=5)
    assert [g.group_id for g in selection.selected] == ["v10", "v9"]
    assert selection.stale == 1
    assert selection.staleness_histogram == {0: 1, 1: 1}
    assert selection.as_metrics()["staleness/behind_1"] == 1.0


def test_on_policy_only_with_zero_staleness() -> None:
    groups = [group("old", version=9), group("new", version=10)]
    selection = select_groups(groups, current_version=10, max_staleness=0, limit=5)
    assert [g.group_id for g in selection.selected] == ["new"]


def test_group_without_calls_is_not_fresh() -> None:
    selection = select_groups([group("x", version=None)], 3, max_staleness=5, limit=5)
    assert selection.selected == [] and selection.stale == 1


def test_already_trained_groups_never_selected() -> None:
    selection = select_groups([group("t", trained=True), group("u")], 10, 0, limit=5)
    assert [g.group_id for g in selection.selected] == ["u"]
    assert selection.already_trained == 1


def test_groups_with_too_few_successes_discarded() -> None:
    groups = [group("f", ("failed", "failed", "succeeded")), group("ok")]
    selection = select_groups(groups, 10, 0, limit=5, min_succeeded=2)
    assert [g.group_id for g in selection.selected] == ["ok"]
    assert selection.too_few_succeeded == 1


def test_limit_keeps_the_first_groups() -> None:
    groups = [group(str(i)) for i in range(5)]
    selection = select_groups(groups, 10, 0, limit=2)
    assert [g.group_id for g in selection.selected] == ["0", "1"]
    assert selection.over_limit == 3
