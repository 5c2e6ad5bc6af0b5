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


def _chart(fig: dict) -> charts.Chart:
    return charts.Chart("t", "T", "", lambda run_id, steps, tasks: fig)


def test_figures_round_their_floats_and_show_bidi_controls_and_csv_the_same():
    noisy = {"data": [{**_scatter("\u202etcerroc\u202c", [1.0700000000000003, 0.36250000000000004]), "x": [1, 2],
                       "customdata": ["/runs/r/rollouts?step=1", "/runs/r/rollouts?step=2"]},
                      {"type": "heatmap", "name": "mean reward", "x": [1], "y": ["task\u2066a"], "z": [[0.1 + 0.2]],
                       "customdata": [["/u"]]}],
             "layout": charts._layout("reward \u202e", {}, [1, 2])}
    fig = charts.figure(_chart(noisy), "run", [object()])
    line, heat = fig["data"]
    assert line["y"] == [1.07, 0.3625] and line["x"] == [1, 2] and isinstance(line["x"][0], int)
    assert heat["z"] == [[0.3]]
    assert line["name"] == "⟨U+202E⟩tcerroc⟨U+202C⟩" and heat["y"] == ["task⟨U+2066⟩a"]
    assert fig["layout"]["title"]["text"] == "reward ⟨U+202E⟩"
    assert "\u202e" not in repr(fig)
    assert [r["value"] for r in charts.figure_rows(fig)] == [1.07, 0.3625, 0.3]
    assert fig["layout"]["meta"]["filename"] == "run-t"


def test_a_step_range_without_steps_says_so_not_that_the_run_did_not_record_it():
    fig = charts.figure(charts.REGISTRY["reward"], "run", [])
    assert fig["layout"]["meta"]["empty"] == charts.NO_STEPS
    assert [a["text"] for a in fig["layout"]["annotations"]] == [charts.NO_STEPS]
    out = charts.overlay({"a": charts.figure(charts.REGISTRY["reward"], "a", []),
                          "b": charts.figure(charts.REGISTRY["reward"], "b", [])})
    assert out["layout"]["meta"]["empty"] == charts.NO_STEPS


def test_compare_hover_and_names_carry_the_run_escaped_and_the_png_is_named():
    def fig():
        f = {"data": [_scatter("mean (errors scored 0)", [0.405, 0.5])], "layout": charts._layout("t", {}, [1, 2])}
        f["data"][0]["hovertemplate"] = "mean (errors scored 0): %{y:.3f}<extra></extra>"
        return charts.figure(_chart(f), "x", [object()])

    out = charts.overlay({"a<b>%{y}": fig(), "run\u202eb": fig()})
    first, second = out["data"]
    assert first["name"] == "a&lt;b&gt;%{y}: mean (errors scored 0)"
    assert first["hovertemplate"] == "a&lt;b&gt;&#37;{y}: mean (errors scored 0): %{y:.3f}<extra></extra>"
    assert second["hovertemplate"].startswith("run⟨U+202E⟩b: mean")
    assert out["layout"]["meta"]["filename"] == "compare-t-a_b_y_-run_b"


def test_the_page_csp_lets_plotly_download_a_png():
    from app.main import CSP

    img = next(d for d in CSP.split(";") if d.strip().startswith("img-src")).split()
    assert "blob:" in img and "data:" in img
