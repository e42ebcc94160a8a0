"""Loading and writing: tokenizers, FASTA streaming, documents, DataModules, track and summary writers."""
