"""Plotly figure builders: plain functions from column data to figures, no database access."""
