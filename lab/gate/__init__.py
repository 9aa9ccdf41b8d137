"""The GO/NO-GO gate over gold-standard suites, and the export of a GO configuration as the serving module."""
