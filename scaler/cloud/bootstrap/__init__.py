"""The worker bootstrap script (package data): from a stock image to a serving worker (issue #38)."""
