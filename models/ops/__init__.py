"""The attention ops, one module (or folder) per op, each with its naive reference beside the fast form.

``linear``: the paper's linear attention (naive, chunked, recurrent; ``linear.chunked`` and ``linear.kept`` are its
fast chunked form); ``gated``, ``delta``, ``window``: the variants; ``kmer``: the k-mer memory's op;
``backends``: which kernel runs an op (pure torch or flash-linear-attention)."""
