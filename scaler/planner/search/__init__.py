"""The pools within the budget (and the vCPU quotas) without listing them: the pool space, how many there are, the top ones and the cheapest covering a demand by branch and bound (pure)."""
