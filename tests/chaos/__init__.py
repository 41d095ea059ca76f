"""Chaos and adversarial tests: real supervisors, real signals, real faults."""
