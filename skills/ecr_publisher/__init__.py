"""Publish a local image to Amazon ECR: repository settings, login, push, digest check."""
