"""Showing a comparison report (its JSON form, docs/harness.md): a rich table for the
terminal and a PNG chart. Works from the JSON alone, so a saved report can be shown again."""

from __future__ import annotations

import math
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
    t = Table(title=Text(title), title_justify="left", caption=Text(_caption(report)), caption_justify="left")
    for name, justify in (("entry", "left"), ("status", "left"), ("compile s", "right"), ("median", "right"),
                          ("p10-p90", "right"), ("reps", "right"), ("x baseline", "right"), ("max abs err", "right"),
                          ("max rel err", "right"), ("tol", "right"), ("patterns fired", "left")):
        t.add_column(name, justify=justify, overflow="fold")
    for e in report["entries"]:
        label, style = STATUS_STYLE[e["status"]]
        lat, num, deltas = e["latency"], e["numerics"], e["deltas"] or {}
        ratio = deltas.get("latency_ratio")
        t.add_row(
            Text(e["name"]), Text(label, style=style), _num(e["compile_seconds"], ".2f"),
            _num(lat and lat["median_ms"], ".3f"), f"{lat['p10_ms']:.3f}-{lat['p90_ms']:.3f}" if lat else "-",
            f"{lat['repetitions']}{'*' if lat['capped'] else ''}" if lat else "-",
            Text(f"{ratio:.2f}x {e['baseline']}" if ratio is not None else "-"),
            _err(num, "max_abs_err"), Text(_err(num, "max_rel_err"), style="" if not num or num["passed"] else "bold red"),
            f"{num['rtol']:.0e}" if num else "-", Text(_fired(e)),
        )
    return t


def print_report(report: dict, console=None) -> None:
    from rich.console import Console

    console = console or Console()
    console.print(table(report))


def _caption(report: dict) -> str:
    lines, skipped = [], {}
    for e in report["entries"]:
        if e["status"] == "skipped":
            skipped.setdefault(e["reason"], []).append(e["name"])
        elif e["status"] == "failed":
            lines.append(f"{e['name']}: failed ({e['failed_stage']}): {e['reason']}")
            if e["repro"]:
                lines.append(f"  reproduce with: {e['repro']}")
        elif e["status"] == "mismatch":
            worst = max((o for o in e["numerics"]["outputs"] if not o["passed"]), key=lambda o: o["max_rel_err"] or float("inf"))
            lines.append(f"{e['name']}: mismatch: {describe_error(worst)}")
    lines += [f"{', '.join(names)}: skipped: {reason}" for reason, names in skipped.items()]
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
    """``pass: pattern xN, ...``, one line per pass."""
    if e["kind"] == "competitor" or e["status"] not in ("ok", "mismatch"):
        return ""
    lines = [f"{p}: " + ", ".join(f"{name} x{n}" for name, n in sorted(counts.items()))
             for p, counts in e["patterns_fired"].items() if counts]
    return "\n".join(lines) if lines else "none"


# ---------------------------------------------------------------------------------------
# The chart.


def plot(report: dict, path: str | os.PathLike) -> None:
    """Two panels, one row per entry: median latency with p10-p90 error bars, and max relative
    error (log scale) against its tolerance. Skipped and failed entries are named, not drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    entries = report["entries"]
    rows = list(range(len(entries)))[::-1]  # the first entry on top
    fig = Figure(figsize=(13, 2.0 + 0.45 * len(entries)), layout="constrained")
    FigureCanvasAgg(fig)
    lat_ax, err_ax = fig.subplots(1, 2, sharey=True, width_ratios=[3, 2])
    labels = [e["name"] for e in entries]
    handles = _latency_panel(lat_ax, entries, rows) + _error_panel(err_ax, entries, rows)
    lat_ax.set_yticks(rows, labels)
    lat_ax.set_ylim(-0.6, len(entries) - 0.4)
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    fig.suptitle(f"{report['model']}: latency and error against {report['reference']['name']} "
                 f"({report['machine'].get('cpu', '')}, {report['created'][:10]})", fontsize=11)
    fig.savefig(path, dpi=110)


def _color(e: dict) -> str:
    if e["kind"] == "cuvil" and e["config"] != "default":
        return ABLATION_COLOR
    return KIND_COLOR[e["kind"]]


def _latency_panel(ax, entries, rows) -> None:
    from matplotlib.patches import Patch

    timed = [(r, e) for r, e in zip(rows, entries) if e["latency"]]
    medians = [e["latency"]["median_ms"] for _, e in timed]
    spread = [[m - e["latency"]["p10_ms"] for m, (_, e) in zip(medians, timed)],
              [e["latency"]["p90_ms"] - m for m, (_, e) in zip(medians, timed)]]
    ax.barh([r for r, _ in timed], medians, xerr=spread, color=[_color(e) for _, e in timed], capsize=3, height=0.6)
    if medians and max(medians) / min(medians) > 20:
        ax.set_xscale("log")
    ax.set_xlabel("latency, ms (median; bars: p10-p90)")
    ax.grid(axis="x", alpha=0.3)
    for (y, e), m, high in zip(timed, medians, spread[1]):
        ax.text(m + high, y, f" {m:.3g} ms", va="center", fontsize=8)
    _name_the_undrawn(ax, [(r, e) for r, e in zip(rows, entries) if not e["latency"]])
    kinds = {_color(e): _kind_label(e) for e in entries}
    return [Patch(color=c, label=label) for c, label in kinds.items()]


def _kind_label(e: dict) -> str:
    if e["kind"] == "cuvil":
        return "Cuvil" if e["config"] == "default" else "Cuvil, pass/pattern off"
    return {"plain-iree": "plain IREE (no Cuvil)", "competitor": "PyTorch"}[e["kind"]]


def _error_panel(ax, entries, rows) -> None:
    checked = [(r, e, e["numerics"]) for r, e in zip(rows, entries) if e["numerics"]]
    # a mismatch with no finite error (NaN, wrong shape) is drawn at 1 (100 %)
    values = [n["max_rel_err"] if n["max_rel_err"] is not None else 1.0 for _, _, n in checked]
    tolerances = [n["rtol"] for _, _, n in checked if n["rtol"] > 0]
    positive = [v for v in values + tolerances if v > 0]
    floor = 10.0 ** (math.floor(math.log10(min(positive))) - 2) if positive else 1e-12  # exact results sit on it
    ax.barh([r for r, _, _ in checked], [max(v, floor) - floor for v in values], left=floor, height=0.6,
            color=["#2ca02c" if n["passed"] else "#d62728" for _, _, n in checked])
    ax.set_xscale("log")
    ax.set_xlim(floor, 10.0 ** (math.ceil(math.log10(max(positive))) + 1) if positive else 1.0)
    marks = [(r, n["rtol"]) for r, _, n in checked if n["rtol"] > 0]
    handles = []
    if marks:
        handles.append(ax.scatter([t for _, t in marks], [r for r, _ in marks], marker="|", s=300, color="black",
                                  zorder=3, label="error tolerance of the output's dtype"))
    ax.set_xlabel("max relative error vs reference (log; green: within tolerance)")
    ax.grid(axis="x", alpha=0.3)
    for (y, _, n), v in zip(checked, values):
        text = " exact" if v == 0 else f" {v:.1e}" + ("" if n["passed"] else " MISMATCH")
        ax.text(max(v, floor), y, text, va="center", fontsize=8, color="black" if n["passed"] else "#d62728")
    _name_the_undrawn(ax, [(r, e) for r, e in zip(rows, entries) if not e["numerics"]])
    return handles


def _name_the_undrawn(ax, rows_entries) -> None:
    """Why a row has no bar, written at the panel's left edge (any x scale)."""
    for y, e in rows_entries:
        ax.text(0.01, y, _why_not_drawn(e), transform=ax.get_yaxis_transform(), va="center", fontsize=8, color="dimgray")


def _why_not_drawn(e: dict) -> str:
    if e["status"] == "skipped":
        return "skipped (no device)" if e["kind"] != "competitor" else "skipped"
    if e["status"] == "failed":
        return f"failed ({e['failed_stage']})"
    return "not timed"
