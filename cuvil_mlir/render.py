"""Showing a comparison report (its JSON form, docs/harness.md): a rich table for the
terminal and a PNG chart. Works from the JSON alone, so a saved report can be shown again."""

from __future__ import annotations

import os

STATUS_STYLE = {"ok": ("ok", "green"), "mismatch": ("MISMATCH", "bold red"), "failed": ("FAILED", "red"),
                "skipped": ("skipped", "yellow")}
KIND_COLOR = {"cuvil": "#1f77b4", "plain-iree": "#7f7f7f", "competitor": "#2ca02c"}  # chart bar colors
ABLATION_COLOR = "#ff7f0e"  # a Cuvil entry with a pass or pattern switched off


# ---------------------------------------------------------------------------------------
# The terminal table.


def table(report: dict):
    """A rich Table: one row per entry, the notes and the skip/failure reasons in its caption."""
    from rich.table import Table
    from rich.text import Text

    ref = report["reference"]
    title = f"{report['model']}: errors against {ref['name']}, latency in ms"
    t = Table(title=title, title_justify="left", caption=_caption(report), caption_justify="left", show_lines=False)
    for name, justify in (("entry", "left"), ("status", "left"), ("compile s", "right"), ("median", "right"),
                          ("p10-p90", "right"), ("reps", "right"), ("x baseline", "right"), ("max abs err", "right"),
                          ("max rel err", "right"), ("tol", "right"), ("patterns fired", "left")):
        t.add_column(name, justify=justify, overflow="fold")
    for e in report["entries"]:
        label, style = STATUS_STYLE[e["status"]]
        lat, num, deltas = e["latency"], e["numerics"], e["deltas"] or {}
        ratio = deltas.get("latency_ratio")
        t.add_row(
            e["name"], Text(label, style=style), _num(e["compile_seconds"], ".2f"),
            _num(lat and lat["median_ms"], ".3f"), f"{lat['p10_ms']:.3f}-{lat['p90_ms']:.3f}" if lat else "-",
            f"{lat['repetitions']}{'*' if lat['capped'] else ''}" if lat else "-",
            f"{ratio:.2f}x {e['baseline']}" if ratio is not None else "-",
            _err(num, "max_abs_err"), Text(_err(num, "max_rel_err"), style="" if not num or num["passed"] else "bold red"),
            f"{num['rtol']:.0e}" if num else "-", _fired(e),
        )
    return t


def print_report(report: dict, console=None) -> None:
    from rich.console import Console

    console = console or Console()
    console.print(table(report))


def _caption(report: dict) -> str:
    lines = []
    for e in report["entries"]:
        if e["status"] == "skipped":
            lines.append(f"{e['name']}: skipped: {e['reason']}")
        elif e["status"] == "failed":
            lines.append(f"{e['name']}: failed ({e['failed_stage']}): {e['reason']}")
            if e["repro"]:
                lines.append(f"  reproduce with: {e['repro']}")
        elif e["status"] == "mismatch":
            worst = max((o for o in e["numerics"]["outputs"] if not o["passed"]), key=lambda o: o["max_rel_err"] or float("inf"))
            lines.append(f"{e['name']}: mismatch: {describe_error(worst)}")
    lines.append("x baseline: this median / the baseline's median (above 1: slower); * capped by max_time; "
                 "rel err = max |got - ref| / max |ref|")
    lines += report["notes"]
    return "\n".join(lines)


def describe_error(o: dict) -> str:
    """One output's error in words (for captions and assertion messages)."""
    head = f"output {o['index']} ({o['dtype']}{o['shape']})"
    if o["problem"] and o["max_rel_err"] is None:
        return f"{head}: {o['problem']}"
    where = ""
    if o["worst_at"] is not None:
        where = f" at {o['worst_at']}: got {o['got']:.6g}, expected {o['expected']:.6g}"
    rel = "inf" if o["max_rel_err"] is None else f"{o['max_rel_err']:.3g}"
    verdict = "<=" if o["passed"] else ">"
    return f"{head}: max rel err {rel} {verdict} tol {o['rtol']:g} (max abs err {_g(o['max_abs_err'])}{where})"


def _num(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _g(value) -> str:
    return "inf" if value is None else f"{value:.3g}"


def _err(num, key: str) -> str:
    if not num:
        return "-"
    return "inf" if num[key] is None else f"{num[key]:.2e}"


def _fired(e: dict) -> str:
    if e["kind"] == "competitor":
        return ""
    parts = [f"{name} x{n}" for counts in e["patterns_fired"].values() for name, n in sorted(counts.items())]
    return ", ".join(parts) if parts else "none"


# ---------------------------------------------------------------------------------------
# The chart.


def plot(report: dict, path: str | os.PathLike) -> None:
    """Two panels, one row per entry: median latency with p10-p90 error bars, and max relative
    error (log scale) against its tolerance. Skipped and failed entries are named, not drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    entries = report["entries"]
    rows = list(range(len(entries)))[::-1]  # the first entry on top
    fig = Figure(figsize=(13, 1.6 + 0.45 * len(entries)), layout="constrained")
    FigureCanvasAgg(fig)
    lat_ax, err_ax = fig.subplots(1, 2, sharey=True, width_ratios=[3, 2])
    labels = [e["name"] for e in entries]
    _latency_panel(lat_ax, entries, rows)
    _error_panel(err_ax, entries, rows)
    lat_ax.set_yticks(rows, labels)
    fig.suptitle(f"{report['model']}: latency and error against {report['reference']['name']} "
                 f"({report['machine'].get('cpu', '')}, {report['created'][:10]})", fontsize=11)
    fig.savefig(path, dpi=110)


def _color(e: dict) -> str:
    if e["kind"] == "cuvil" and e["config"] != "default":
        return ABLATION_COLOR
    return KIND_COLOR[e["kind"]]


def _latency_panel(ax, entries, rows) -> None:
    medians = [e["latency"]["median_ms"] if e["latency"] else 0.0 for e in entries]
    low = [m - e["latency"]["p10_ms"] if e["latency"] else 0.0 for e, m in zip(entries, medians)]
    high = [e["latency"]["p90_ms"] - m if e["latency"] else 0.0 for e, m in zip(entries, medians)]
    ax.barh(rows, medians, xerr=[low, high], color=[_color(e) for e in entries], capsize=3, height=0.6)
    shown = [m for m in medians if m > 0]
    if shown and max(shown) / min(shown) > 20:
        ax.set_xscale("log")
    ax.set_xlabel("latency, ms (median; bars: p10-p90)")
    ax.grid(axis="x", alpha=0.3)
    for y, e, m, h in zip(rows, entries, medians, high):
        text = f" {m:.3g} ms" if e["latency"] else f" {_why_not_drawn(e)}"
        ax.text(m + h if e["latency"] else 0, y, text, va="center", fontsize=8,
                color="black" if e["latency"] else "dimgray")


def _error_panel(ax, entries, rows) -> None:
    floor = 1e-12  # zero error (exact) is drawn at the floor of the log axis
    errors, colors = [], []
    for e in entries:
        num = e["numerics"]
        value = None if not num else (num["max_rel_err"] if num["max_rel_err"] is not None else 1.0)
        errors.append(max(value, floor) if value is not None else 0.0)
        colors.append("#2ca02c" if num and num["passed"] else "#d62728")
    drawn = [r for r, e in zip(rows, entries) if e["numerics"]]
    ax.barh(drawn, [errors[i] - floor for i, e in enumerate(entries) if e["numerics"]], left=floor,
            color=[colors[i] for i, e in enumerate(entries) if e["numerics"]], height=0.6)
    ax.set_xscale("log")
    tolerances = [(r, e["numerics"]["rtol"]) for r, e in zip(rows, entries) if e["numerics"] and e["numerics"]["rtol"] > 0]
    if tolerances:
        ax.scatter([t for _, t in tolerances], [r for r, _ in tolerances], marker="|", s=300, color="black",
                   label="tolerance", zorder=3)
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(left=floor)
    ax.set_xlabel("max relative error vs reference (log; green: within tolerance)")
    ax.grid(axis="x", alpha=0.3)
    for y, e, v in zip(rows, entries, errors):
        num = e["numerics"]
        if num is None:
            ax.text(floor, y, f" {_why_not_drawn(e)}", va="center", fontsize=8, color="dimgray")
        else:
            exact = num["max_rel_err"] == 0
            ax.text(v, y, " exact" if exact else f" {v:.1e}" + ("" if num["passed"] else " MISMATCH"), va="center",
                    fontsize=8, color="black" if num["passed"] else "#d62728")


def _why_not_drawn(e: dict) -> str:
    if e["status"] == "skipped":
        return "skipped (no device)"
    if e["status"] == "failed":
        return f"failed ({e['failed_stage']})"
    return "not timed"
