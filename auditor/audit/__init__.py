"""The audit: checkpoints, the gate -> format -> observe -> record pipeline, and what a run
spends (budget, batch, critique, schedule, evaluation on labels).
"""
