"""Sweeps: many query-time configurations over cached candidates, strategies, the overfitting guard, outputs."""
