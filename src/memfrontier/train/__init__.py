"""Training: reward functions and trainers (BudgetMem router PPO, ...)."""
