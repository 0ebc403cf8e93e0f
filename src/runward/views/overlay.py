"""Attempts overlaid (`runward plot NAME --attempts 5,6,7`): x = step, one line per attempt,
labelled "#N", a panel for the throughput and one for the loss. The figure's data is read
back from matplotlib's own lines and returned, so `--json` says what was really drawn."""

from __future__ import annotations


def parse_attempts(text: str) -> list[int]:
    """"5,6,7" -> [5, 6, 7]; ValueError naming the bad part."""
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--attempts {text!r}: {part!r} is not an attempt number")
        if int(part) not in out:
            out.append(int(part))
    return out


def draw(doc: dict, out_path: str) -> dict:
    """Draw the overlay document (api.overlay) to OUT_PATH; return {"panels": {metric:
    [{"attempt", "label", "x", "y"}]}} as read back from the figure."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only; never a window, works over ssh
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("runward plot needs matplotlib, which is not installed: "
                          "pip install matplotlib (or pip install 'runward[plot]')") from e
    rows = doc["attempts"]
    # one panel per metric column (1 = throughput, 2 = loss), named as the attempts print it
    panels = [(col, next((r[key] for r in rows if r.get(key)), None)) for col, key in ((1, "throughput"), (2, "loss"))]
    panels = [(c, n) for c, n in panels if n]
    fig, axes = plt.subplots(len(panels), 1, sharex=True, squeeze=False, figsize=(9, 2.6 * len(panels) + 0.6))
    for ax, (col, metric) in zip(axes[:, 0], panels):
        for r in rows:
            pts = [(p[0], p[col]) for p in r["points"] if _finite(p[col]) and p[0] is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], lw=1.2, label=f"#{r['attempt']}")
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    axes[-1, 0].set_xlabel(next((r["step"] for r in rows if r.get("step")), "step"))
    fig.suptitle(f"{doc['name']}: attempts " + ", ".join(str(r["attempt"]) for r in rows))
    fig.savefig(out_path)
    drawn = {metric: [{"attempt": int(ln.get_label().lstrip("#")), "label": ln.get_label(),
                       "x": [float(v) for v in ln.get_xdata()], "y": [float(v) for v in ln.get_ydata()]}
                      for ln in ax.get_lines()]
             for ax, (_, metric) in zip(axes[:, 0], panels)}
    plt.close(fig)
    return {"panels": drawn}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and v == v and v not in (float("inf"), float("-inf"))
