"""What a results folder keeps of the load generator: each stage's logs, status lines and
job file (``generator/``), the job without the keys it sent."""

from __future__ import annotations

import shutil
from pathlib import Path

from loadtest.generator.job import GeneratorJob


def keep_logs(work: Path, out_dir: Path) -> None:
    """Copy the stages' generator files of ``work`` into ``out_dir/generator``."""
    target = out_dir / "generator"
    target.mkdir(parents=True, exist_ok=True)
    for folder in sorted(work.glob("stage-*")):
        for source in (folder / "generator.log", folder / "status.jsonl", *folder.glob("worker-*.log")):
            if source.exists():
                shutil.copy(source, target / f"{folder.name}.{source.name}")
        if (job := folder / "job.json").exists():
            redacted = GeneratorJob.model_validate_json(job.read_text(encoding="utf-8")).redacted()
            (target / f"{folder.name}.job.json").write_text(redacted.model_dump_json(), encoding="utf-8")
