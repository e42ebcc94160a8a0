"""LightningModules: losses, metrics, optimizers, long-context training, prediction writers."""
