"""What every tool shares: errors, results, progress, clients and the tool contract."""
