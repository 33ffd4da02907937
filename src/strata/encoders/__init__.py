"""Text encoders: the dense embedder and the cross-encoder, and the one torch lock they share."""
