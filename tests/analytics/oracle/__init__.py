"""Test oracles: independent reference computations the product's single implementation is
checked against (they live here, not in the product: one implementation per figure)."""
