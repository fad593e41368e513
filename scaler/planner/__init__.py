"""Which pool to hold (pure): Kairos's upper bound and searches, Kairos+, the confirmed picks, one model's plan, the joint plan and the budget split."""
