"""What only the marimo notebooks (and `lab tune --export`) use: views over a tuning session and its offline export."""
