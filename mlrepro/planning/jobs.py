"""What the rules whose jobs run in Snakemake's process (``run:``) do, with the plan's settings."""

from __future__ import annotations

from pathlib import Path

from mlrepro.planning.plan import Plan


def launch_preview(plan: Plan, out: str | Path, log: str | Path) -> str:
    """Every (system, benchmark)'s launch as its runs will execute it (mlrepro/runs/preview.py); the node-hours
    table, also written to the log."""
    from mlrepro.runs import preview

    entries = []
    for s, b in plan.ordered_units:
        launch = plan.launch_spec(s, b)
        record = plan.image_record(b, s)
        item = preview.entry(s, launch, plan.units[(s, b)].runs, plan.run_seed(b, 0), record[0] if record else None,
                             str(plan.out.run_dir(s, b, 0).resolve()))
        entries.append(preview.with_node_hours(item, plan.run_shape(s, b).minutes))
    preview.write(Path(out), entries)
    text = preview.table(entries)
    Path(log).write_text(text + "\n", encoding="utf-8")
    return text
