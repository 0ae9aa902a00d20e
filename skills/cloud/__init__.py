"""Cloud SDK client factories (AWS, Docker) from the standard environment."""
