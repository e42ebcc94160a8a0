"""Softmax -> linear conversion pieces: the T2R map, LoRA, the student builder and the layer-wise attention."""
