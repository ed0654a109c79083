"""What model calls cost: the price catalogue, the prices kept in the store, re-pricing."""
