"""LoRA adapters: made at set-up (:mod:`.training`), stored beside the models
(:mod:`.store`), checked before an engine loads them (:mod:`.checks`)."""
