"""Images: picture decoding and resizing, the strata-vision helper process, embeddings files for GENI."""
