"""Saving and loading: model directories, Lightning checkpoints, carried states."""
