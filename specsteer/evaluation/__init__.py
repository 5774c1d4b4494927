"""Evaluation grids, metrics, benchmarks, the deployment projection and plots."""
