"""The LightningCLI recipes (YAML), shipped as package data: ``strandline.resources.shipped_path("configs", ...)``."""
