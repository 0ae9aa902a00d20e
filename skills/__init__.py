"""The capabilities behind the tools in commands/; each subpackage has a SKILL.md for agents."""
