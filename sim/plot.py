"""``--plot``: per-instance utilization, queue length, KV usage and KV sent over simulated time (matplotlib)."""

from __future__ import annotations

from pathlib import Path


def plot_instances(rows: list[dict], path: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("utilization", "busy fraction"), ("waiting", "waiting sequences"), ("kv_usage", "KV usage"),
              ("transfer_gb", "KV sent per bin (GB)")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 11), sharex=True)
    for ax, (key, label) in zip(axes, panels):
        for r in rows:
            if key == "transfer_gb" and not r["transfer_gb"]:
                continue
            if key == "kv_usage" and r["role"] == "prefill":
                continue
            ax.plot(r["series"]["t"], r["series"][key], label=r["name"], linewidth=1)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("simulated time (s)")
    if len(rows) <= 16:
        axes[0].legend(ncol=8, fontsize=7, loc="upper right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
