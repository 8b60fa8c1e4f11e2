"""Shared widgets as plain functions returning Dash components."""
