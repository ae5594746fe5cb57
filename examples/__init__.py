"""Runnable example topologies."""
