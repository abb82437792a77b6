"""Prepared LoRA adapters: ``<home>/adapters/<base model>/<adapter>/``, one folder per
:class:`~serving.config.model_spec.AdapterRecipe` of a model spec, made by
:func:`~serving.adapters.training.train_adapter`. A ready folder carries a marker with
the fingerprint of what made it (recipe, training text, base model's source), so
preparing again is a no-op until one of them changes."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from serving.config.adapters import AdapterSpec
from serving.config.model_spec import AdapterRecipe, ModelSpec
from serving.errors import ConfigError, ModelNotPreparedError

READY_MARKER = ".serveout-ready.json"


class AdapterStore:
    """The adapters made for the model specs of one models folder, under one home."""

    def __init__(self, home: Path, specs_dir: Path) -> None:
        self.home, self.specs_dir = home, specs_dir

    def path(self, model: ModelSpec, name: str) -> Path:
        return self.home / "adapters" / model.name / self.recipe(model, name).name

    @staticmethod
    def recipe(model: ModelSpec, name: str) -> AdapterRecipe:
        for recipe in model.adapters:
            if recipe.name == name:
                return recipe
        known = ", ".join(r.name for r in model.adapters) or "none"
        raise ConfigError(f"model {model.name!r} has no adapter recipe {name!r} (its recipes: {known})")

    def fingerprint(self, model: ModelSpec, recipe: AdapterRecipe) -> str:
        digest = hashlib.sha256()
        digest.update(recipe.model_dump_json().encode())
        digest.update(model.source.model_dump_json().encode())
        digest.update((self.specs_dir / recipe.data).read_bytes())
        return digest.hexdigest()[:16]

    def is_ready(self, model: ModelSpec, name: str) -> bool:
        marker = self.path(model, name) / READY_MARKER
        if not marker.is_file():
            return False
        recorded = json.loads(marker.read_text()).get("fingerprint")
        return recorded == self.fingerprint(model, self.recipe(model, name))

    def spec(self, model: ModelSpec, name: str) -> AdapterSpec:
        """The served adapter of recipe ``name``; raises :class:`ModelNotPreparedError`
        when it is not made yet."""
        recipe = self.recipe(model, name)
        if not self.is_ready(model, name):
            raise ModelNotPreparedError(f"adapter {name!r} of {model.name} is not prepared; run "
                                        f"`serving models prepare {model.name}`")
        return AdapterSpec(name=recipe.name, path=self.path(model, name), rank=recipe.rank,
                           description=recipe.description)

    def prepare(self, model: ModelSpec, base_path: Path, *, log=print) -> list[Path]:
        """Make every adapter of ``model`` not ready yet (``base_path``: its weights)."""
        from serving.adapters.training import train_adapter

        made = []
        for recipe in model.adapters:
            target = self.path(model, recipe.name)
            if self.is_ready(model, recipe.name):
                log(f"adapter {recipe.name} of {model.name} is ready at {target}")
                made.append(target)
                continue
            log(f"training adapter {recipe.name} of {model.name} ({recipe.steps} steps, about a minute)")
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{recipe.name}-", dir=target.parent))
            try:
                train_adapter(recipe, base_path, self.specs_dir / recipe.data, staging, log=log)
                (staging / READY_MARKER).write_text(json.dumps(
                    {"fingerprint": self.fingerprint(model, recipe)}, indent=2))
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            made.append(target)
        return made
