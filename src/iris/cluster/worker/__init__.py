"""The worker daemon: registers with the controller, serves Reconcile and log reads, runs attempts."""
