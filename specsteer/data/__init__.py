"""Histories, retrieval, task prompts, datasets, the privacy audit, private facts and output hygiene."""
