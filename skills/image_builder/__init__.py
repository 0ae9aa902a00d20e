"""Dockerfile analysis and the fixes the build loop applies (its tables: skills/catalog)."""
