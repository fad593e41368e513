"""``costscale replay``: a day of traffic through the daemon's own loops on a virtual clock, scored in dollars, SLO attainment and accuracy, against baselines."""
