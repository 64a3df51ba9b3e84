# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job report as one self-contained HTML file: the model of _report.timeline drawn with matplotlib
(Agg, no display) as inline SVG; no script, no stylesheet or image from elsewhere, so it opens offline.

Sections: header (command, world size, nodes, result, fabric check), the first failure, the timeline
per node and rank, step time per node with the median and the stragglers, rank 0's loss, and the
resource samples per node (CPU use and RSS per rank)."""
from __future__ import annotations

import html
import io
import os
import re
import time


def _pyplot():
    import matplotlib  # controller only: requirements.txt
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["svg.hashsalt"] = "mt-report"
    from matplotlib import pyplot
    return pyplot


def svg(figure):
    """A figure as an inline <svg> element (no XML prolog, no date)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    _pyplot().close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


# Points per plotted series: a long job's step lines (thousands per rank) would make the page megabytes
# of SVG paths; beyond this, consecutive points are binned (mean time, median value).
MAX_POINTS = 400


def thin(points, limit=MAX_POINTS):
    """[(x, y)] in x order -> at most ``limit`` points: each of ``limit`` runs of consecutive points as
    (its mean x, its median y), so a spike wider than one run still shows."""
    if len(points) <= limit:
        return list(points)
    out = []
    for index in range(limit):
        chunk = points[index * len(points) // limit:(index + 1) * len(points) // limit]
        ys = sorted(y for _x, y in chunk)
        out.append((sum(x for x, _y in chunk) / len(chunk), ys[len(ys) // 2]))
    return out


def _t0(model):
    times = [e["t"] for e in model["events"]]
    return min(times) if times else 0.0


def timeline_figure(model):
    plt = _pyplot()
    rows = [(host, key.split("_", 1)[1]) for host in model["hosts"] if host in model["nodes"]
            for key in sorted(model["nodes"][host]["ranks"], key=lambda k: k.split("_", 1)[1])]
    rows = list(dict.fromkeys(rows))
    t0, end = _t0(model), max([e["t"] for e in model["events"]] or [0])
    figure, axes = plt.subplots(figsize=(9, 0.4 * len(rows) + 1.2))
    for host in model["hosts"]:
        for key, record in (model["nodes"].get(host) or {"ranks": {}})["ranks"].items():
            start, exit_ = record.get("start") or {}, record.get("exit")
            row = rows.index((host, key.split("_", 1)[1]))
            stop = exit_["time"] if exit_ else end
            color = "#999999" if not exit_ else ("#2e7d32" if not exit_.get("exitcode") else "#c62828")
            axes.barh(row, stop - start.get("time", stop), left=start.get("time", stop) - t0, color=color, height=0.6)
            if start.get("restart"):
                axes.plot(start["time"] - t0, row, marker="|", color="black", markersize=14)
    failure = model["first_failure"]
    if failure:
        row = rows.index((failure["host"], failure["key"].split("_", 1)[1]))
        axes.plot(failure["t"] - t0, row, marker="X", color="black", markersize=12)
        axes.annotate("first failure: rank %s" % failure["rank"], (failure["t"] - t0, row), xytext=(5, 8),
                      textcoords="offset points")
    axes.set_yticks(range(len(rows)), ["%s local %s" % row for row in rows])
    axes.set_xlabel("seconds since the first rank started")
    axes.set_title("ranks: green exit 0, red failed, grey no exit recorded, | restart, X first failure")
    return figure


def step_figure(model):
    plt = _pyplot()
    from ansible_collections.multinode.training.plugins.module_utils._report.straggler import step_times
    figure, axes = plt.subplots(figsize=(9, 3.2))
    t0 = _t0(model)
    for host, node in model["nodes"].items():
        points = thin(sorted(p for steps in node["steps"].values() for p in step_times(steps)))
        if points:
            axes.plot([t - t0 for t, _s in points], [s for _t, s in points], ".-", label=host)
    verdict = model.get("cpu_straggler") or model["straggler"]  # this plot's figure: per step
    if model.get("measure") == "demand":  # the rule's figure per node: CPU time + run-queue wait per step
        for host, value in model["step_time"].items():
            if value:
                axes.axhline(value, linestyle=":", color=axes.plot([], [])[0].get_color(),
                             label="%s: CPU + run-queue wait per step%s" % (
                                 host, " (steps of global rank 0)" if host in model.get("steps_of_rank0", []) else ""))
    if verdict["median"]:
        axes.axhline(verdict["median"], color="black", linestyle="--", label="median of nodes")
    axes.set_xlabel("seconds (points: wall time between step lines)")
    axes.set_ylabel("seconds per step")
    axes.set_title(verdict["line"])
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")
    return figure


def loss_figure(model):
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 2.8))
    points = thin([(s["step"], s["loss"]) for s in model["loss"]])
    axes.plot([x for x, _y in points], [y for _x, y in points], ".-")
    axes.set_xlabel("step")
    axes.set_ylabel("loss (global rank 0)")
    return figure


def resource_figure(host, node, t0):
    plt = _pyplot()
    figure, (cpu, rss) = plt.subplots(1, 2, figsize=(9, 2.8))
    for key, series in sorted(node["samples"].items()):
        use = thin([(b["t"] - t0, 100 * (b["cpu"] - a["cpu"]) / max(b["t"] - a["t"], 1e-6))
                    for a, b in zip(series, series[1:])])
        mem = thin([(s["t"] - t0, s["rss"] / 2 ** 20) for s in series])
        cpu.plot([x for x, _y in use], [y for _x, y in use], label=key)
        rss.plot([x for x, _y in mem], [y for _x, y in mem], label=key)
    cpu.set_ylabel("CPU %")
    rss.set_ylabel("RSS MiB")
    cpu.set_title("%s: CPU per rank (restart_local rank)" % host, fontsize="small")
    if cpu.get_legend_handles_labels()[0]:
        cpu.legend(fontsize="x-small")
    return figure


def _header(model, extra):
    job = next((n["job"] for n in model["nodes"].values() if n["job"]), {})
    results = {h: (n["result"] or {}).get("rc") for h, n in model["nodes"].items()}
    world = sum(len({k.split("_", 1)[1] for k in n["ranks"]}) for n in model["nodes"].values())
    rows = [("job", model["job_id"]), ("command", " ".join(job.get("cmd") or [])), ("world size", world),
            ("nodes", ", ".join(model["hosts"])), ("exit codes", results),
            ("lost nodes", ", ".join(model["lost"]) or "none")]
    rows += [(key, model["environment"][key]) for key in ("python", "environment", "versions")
             if key in model.get("environment", {})]
    sources = sorted(set((model.get("sampler_cost_source") or {}).values()))
    rows.append(("sampler cost (CPU s per node per minute%s)" % (", " + "; ".join(sources) if sources else ""),
                 model["sampler_cost"]))
    rows += sorted((extra or {}).items())
    if model["fabric"] is not None:
        fabric = model["fabric"]
        rows.append(("fabric check", fabric.get("line") or fabric.get("verdict") or fabric.get("status") or fabric))
    return "".join("<tr><th>%s</th><td>%s</td></tr>" % (html.escape(str(k)), html.escape(str(v))) for k, v in rows)


def _failure(model):
    failure = model["first_failure"]
    if not failure:
        return "<p id=\"failure\">No rank failed.</p>"
    return ("<p id=\"failure\">First failure: rank %s (node %s, local %s, restart %s) exit code %s at %s: "
            "<code>%s</code></p>" % tuple(html.escape(str(v)) for v in (
                failure["rank"], failure["host"], failure["key"].split("_", 1)[1], failure["restart"],
                failure["exitcode"], time.strftime("%H:%M:%S", time.gmtime(failure["t"])), failure["message"])))


def arrival_table(model):
    """Per node: the straggler figures side by side - the flight recorder's (what it costs the others, which
    decides, its time per collective not spent waiting for other ranks, its ratio to the median, the wait and the
    time per collective) and the CPU
    figure (CPU + run-queue wait per step), the secondary one; '' without either."""
    arrival, cpu = model.get("arrival") or {}, model.get("step_time") or {}
    main = model["straggler"] if arrival else {}
    if not arrival and not any(cpu.values()):
        return ""
    head = ("node", "costs the others (their time waiting for it)", "not waiting per collective",
            "ratio to the median", "wait per collective", "time per collective", "blocks compared",
            "%s (secondary)" % (
                "CPU + run-queue wait per step" if model.get("measure") == "demand" else "wall time per step"))
    rows = []
    for host in model["nodes"]:
        fig = arrival.get(host) or {}
        cells = [host] + (["%.1f%%" % (100 * fig.get("cost", 0.0)), "%.4f s" % fig["work"],
                           "%.2fx" % main.get("ratios", {}).get(host, 0),
                           "%.4f s%s" % (fig["wait"], " (GPU)" if fig.get("gpu") else ""), "%.4f s" % fig["period"],
                           fig["blocks"]] if fig else ["-"] * 6)
        cells.append("%.4f s" % cpu[host] if cpu.get(host) else "-")
        rows.append("<tr>%s</tr>" % "".join("<td>%s</td>" % html.escape(str(c)) for c in cells))
    secondary = (model.get("cpu_straggler") or {}).get("line", "")
    return ("<table id=\"arrival\"><tr>%s</tr>%s</table>%s" % (
        "".join("<th>%s</th>" % html.escape(h) for h in head), "".join(rows),
        "<p id=\"secondary\">secondary: %s</p>" % html.escape(secondary) if arrival and secondary else ""))


def render(model, extra=None):
    """The report's HTML text."""
    t0 = _t0(model)
    sections = [("Timeline", svg(timeline_figure(model))) if model["events"] else ("Timeline", "<p>No rank started.</p>"),
                ("Step time per node", svg(step_figure(model)))]
    if model["loss"]:
        sections.append(("Loss (global rank 0)", svg(loss_figure(model))))
    for host, node in model["nodes"].items():
        if node["samples"]:
            sections.append(("Resources: %s" % host, svg(resource_figure(host, node, t0))))
    body = "".join("<h2>%s</h2>%s" % (html.escape(title), content) for title, content in sections)
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Job report %s</title><style>"
            "body{font-family:sans-serif;margin:1em 2em}th{text-align:left;padding-right:1em}"
            "#straggler{font-weight:bold}</style></head><body><h1>Job report %s</h1><table>%s</table>"
            "<p id=\"straggler\">%s</p>%s%s%s</body></html>\n"
            % (html.escape(model["job_id"]), html.escape(model["job_id"]), _header(model, extra),
               html.escape(model["straggler"]["line"]), arrival_table(model), _failure(model), body))


def external_references(text):
    """src/href attributes that point off the page (the test's and the writer's check)."""
    return re.findall(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//[^\"' >]*", text)


def write(model, path, extra=None):
    """Write the report to ``path`` (atomically); its size in bytes."""
    text = render(model, extra)
    if external_references(text):
        raise ValueError("the report refers to %s" % external_references(text))
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write(text)
    os.rename(tmp, path)
    return len(text.encode())
