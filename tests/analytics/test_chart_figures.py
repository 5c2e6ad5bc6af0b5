"""The chart registry's figure helpers without a server (issue 23): what a run did not record is
marked, compare gives each run one colour and each statistic its dash, and stacked bars of
several runs stand side by side, each run stacked on its own base."""
from __future__ import annotations

from app import charts


def _scatter(name: str, ys: list, dash: str | None = None) -> dict:
    return {"type": "scatter", "mode": "lines", "name": name, "x": [1, 2], "y": ys,
            "line": {"color": "#000", **({"dash": dash} if dash else {})}}


def test_a_series_not_recorded_is_marked_and_a_chart_with_nothing_says_so():
    fig = charts.mark_empty({"data": [_scatter("a", [None, None]), _scatter("b", [1.0, None])],
                             "layout": charts._layout("t", {}, [1, 2])})
    assert fig["data"][0]["meta"] == {"empty": True} and "meta" not in fig["data"][1]
    assert "empty" not in (fig["layout"].get("meta") or {})
    for data in ([], [_scatter("a", [None, None])]):
        fig = charts.mark_empty({"data": data, "layout": charts._layout("t", {}, [1, 2])})
        assert fig["layout"]["meta"]["empty"] == charts.NOT_RECORDED
        assert [a["text"] for a in fig["layout"]["annotations"]] == [charts.NOT_RECORDED]
        assert fig["layout"]["xaxis"]["visible"] is False and fig["layout"]["yaxis"]["visible"] is False


def test_compare_gives_each_run_a_colour_and_each_statistic_a_dash():
    def fig():
        return {"data": [_scatter("median (errors scored 0)", [1, 2], dash="dash"),
                         _scatter("mean (errors scored 0)", [1, 2]), _scatter("mean (errors dropped)", [1, 2]),
                         _scatter("p90", [3, 4])],
                "layout": charts._layout("t", {}, [1, 2])}

    out = charts.overlay({"a": fig(), "b": fig()})
    got = {t["name"]: (t["line"]["color"], t["line"]["dash"]) for t in out["data"]}
    assert {c for n, (c, _) in got.items() if n.startswith("a: ")} == {charts.PALETTE[0]}
    assert {c for n, (c, _) in got.items() if n.startswith("b: ")} == {charts.PALETTE[1]}
    for run in "ab":
        assert got[f"{run}: mean (errors scored 0)"][1] == got[f"{run}: mean (errors dropped)"][1] == "solid"
        assert got[f"{run}: median (errors scored 0)"][1] == "dash"
        assert got[f"{run}: p90"][1] not in ("solid", "dash")


def test_compare_puts_each_runs_stack_beside_the_others():
    def bars():
        return {"data": [{"type": "bar", "name": e, "x": [1, 2], "y": y, "marker": {"color": "#000"}}
                         for e, y in (("submitted", [0.75, 0.5]), ("error", [0.25, 0.5]))],
                "layout": {**charts._layout("t", {}, [1, 2]), "barmode": "stack"}}

    out = charts.overlay({"a": bars(), "b": bars()})
    assert out["layout"]["barmode"] == "group"
    assert [(t["offsetgroup"], t["base"]) for t in out["data"]] == [
        ("a", [0, 0]), ("a", [0.75, 0.5]), ("b", [0, 0]), ("b", [0.75, 0.5])]
    assert [t["y"] for t in out["data"]] == [[0.75, 0.5], [0.25, 0.5]] * 2  # the values (and the CSV) unchanged
