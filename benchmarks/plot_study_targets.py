"""The study's sequence on three machines in one plot: each step's speedup over the baseline as
the study published it on a GPU, as hlofuse measures it on the CPU (`hlofuse cartpole`'s
cartpole.json) and on a TPU (docs/results/tpu/study_table.json).

    OMP_NUM_THREADS=1 hlofuse cartpole --envs 16384 --steps 200 --repeats 9 --clock cpu
    python benchmarks/plot_study_targets.py --cpu results/cartpole.json --out docs/study_targets.png

docs/study_targets.png was drawn from docs/results/cartpole_cpu_45.json (that command, on a
2-core AMD EPYC shared with nothing else at the time; the CPU figures vary by about 10 % run to
run there: relaxed-concat, the baseline's program, came out 0.90x).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from hlofuse.studies.cartpole_study import SEQUENCE
from hlofuse.studies.gpu_predict import PUBLISHED


def published_speedups() -> dict[str, float]:
    """The study's GPU figures as numbers ("up to 10.56x" -> 10.56; "~1.1x" -> 1.1)."""
    found = {step: re.search(r"[\d.]+", text) for step, text in PUBLISHED.items()}
    return {"baseline": 1.0, **{s: float(m.group()) for s, m in found.items() if m}}


def measured_speedups(path: Path, envs: int, key: str) -> dict[str, float]:
    records = json.loads(path.read_text())["records"]
    return {r["step"]: float(r[key]) for r in records if r["envs"] == envs and r.get(key)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=Path, required=True, help="hlofuse cartpole's JSON")
    parser.add_argument("--cpu-envs", type=int, default=16384)
    parser.add_argument("--tpu", type=Path, default=Path("docs/results/tpu/study_table.json"))
    parser.add_argument("--out", type=Path, default=Path("docs/study_targets.png"))
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s.name for s in SEQUENCE if s.is_default]
    series = [
        ("GPU, the study (published)", published_speedups()),
        (f"CPU, hlofuse, N = {args.cpu_envs:,} (one thread)",
         measured_speedups(args.cpu, args.cpu_envs, "cpu_speedup_vs_baseline")),
        ("TPU v5e, hlofuse, N = 16,384",
         measured_speedups(args.tpu, 16384, "speedup_vs_baseline")),
        ("TPU v5e, hlofuse, N = 1,048,576",
         measured_speedups(args.tpu, 1048576, "speedup_vs_baseline")),
    ]
    width = 0.2
    fig, ax = plt.subplots(figsize=(11, 5))
    for k, (label, values) in enumerate(series):
        xs = [i + (k - 1.5) * width for i, s in enumerate(steps) if s in values]
        ys = [values[s] for s in steps if s in values]
        bars = ax.bar(xs, ys, width, label=label)
        ax.bar_label(bars, labels=[f"{y:.2g}" for y in ys], fontsize=6)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(steps)), steps, rotation=20)
    ax.set_ylabel("speedup over the baseline")
    ax.set_title("CartPole: the study's sequence on a GPU (published), a CPU and a TPU (T = 200)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
