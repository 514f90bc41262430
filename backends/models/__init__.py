"""Embedding models: the model and its identity, the encoder that runs its weights, and
batched embedding."""
