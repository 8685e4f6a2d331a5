"""Workloads written with the front end."""
