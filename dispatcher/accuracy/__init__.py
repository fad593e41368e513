"""The live accuracy plan's routing: the plan's router and the application's variant per query."""
