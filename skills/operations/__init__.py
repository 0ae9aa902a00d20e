"""The operations runtime: detached, recorded long work; process identity; locked records."""
