"""What instances cost: on-demand prices from the Price List API, spot prices from the price history, and their cache files."""
