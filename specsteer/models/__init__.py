"""Model pairings, weights, loading, chat formats, runtime calibration and the tiny test models."""
