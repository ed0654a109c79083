"""What model calls cost: the price catalogue and the prices kept in the store."""
