"""One module per admin page."""
